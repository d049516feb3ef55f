import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DashboardHandle, startDashboard } from '../dashboard/server.ts';
import { readJobStatus } from '../producer/job-status.ts';
import type { JobData } from '../shared/job.ts';
import { purgeDeadLetters } from '../worker/dead-letters.ts';
import type { WorkerHandle } from '../worker/worker.ts';
import { allCompleted, openPool, type Pool, request } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const TOKEN = 'board-fixes-token-3c';
const bearer = { authorization: `Bearer ${TOKEN}` };

describe('Bull Board where it meets llmq', () => {
  let pool: Pool;
  let worker: WorkerHandle;
  let dashboard: DashboardHandle;
  let ok: string;
  let dead: string;

  beforeAll(async () => {
    // The mock refuses max_tokens above 1,000 with a 400: that job is dead-lettered at once.
    pool = await openPool('board', { latencyMs: 5, maxOutputTokens: 1_000 });
    worker = await pool.worker({ concurrency: 2 });
    ok = await pool.producer.enqueue(request('fine', 50), { tenant: 'acme' });
    dead = await pool.producer.enqueue(request('too long', 2_000), { tenant: 'acme' });
    await allCompleted(pool, [ok]);
    await until(async () => (await pool.dlq.getJobCountByTypes('wait')) === 1, 20_000);
    await until(async () => (await pool.queue.getJobLogs(dead)).count >= 2, 5_000);
    await worker.stop(5_000);
    dashboard = await startDashboard({
      redis: pool.redis,
      prefix: pool.names.prefix,
      port: 0,
      auth: { token: TOKEN },
    });
  });

  afterAll(async () => {
    await dashboard?.close();
    await pool?.cleanup();
  });

  async function api(path: string, init: RequestInit = {}) {
    const res = await fetch(dashboard.baseUrl + path, {
      ...init,
      headers: { ...bearer, ...(init.headers as Record<string, string>) },
    });
    const text = await res.text();
    // biome-ignore lint/suspicious/noExplicitAny: Bull Board's JSON, read by the test
    return { status: res.status, body: (text ? JSON.parse(text) : null) as any };
  }
  const board = async () => {
    const { body } = await api('/api/queues');
    const by = Object.fromEntries(body.queues.map((q: { name: string }) => [q.name, q]));
    return { main: by[pool.names.queue], letters: by[`${pool.names.queue}-dead`] };
  };

  it('counts a dead letter once, among the dead letters, with its reason', async () => {
    const { main, letters } = await board();
    expect(main.counts).toMatchObject({ completed: 1, failed: 0, waiting: 0 });
    expect(letters.counts).toMatchObject({ failed: 1, waiting: 0 });
    expect(letters.statuses).toEqual(['latest', 'failed']);
    // Nothing consumes dead letters: no "No workers" warning (false would show one).
    expect(letters.hasWorkers).toBeNull();
    const list = await api(
      `/api/queues?activeQueue=${pool.names.queue}-dead&status=failed&page=1&jobsPerPage=10`,
    );
    const shown = list.body.queues.find((q: { name: string }) => q.name.endsWith('-dead'));
    expect(shown.jobs).toHaveLength(1);
    expect(shown.jobs[0]).toMatchObject({ id: dead, isFailed: true });
    expect(shown.jobs[0].failedReason).toMatch(/max_tokens: 2000 > 1000/);
    expect(shown.jobs[0].name).toBe('claude-test-1 · acme');
    // The job itself is kept, failed, with its history: its id still answers with the letter.
    expect(await pool.queue.getJobState(dead)).toBe('failed');
    const status = await readJobStatus(pool.queue, pool.dlq, dead);
    expect(status).toMatchObject({ state: 'failed', error: { status: 400 } });
    const logs = await api(`/api/queues/${pool.names.queue}-dead/${dead}/logs`);
    expect(logs.body.join('\n')).toMatch(/dead-lettered: .*max_tokens/);
    const one = await api(`/api/queues/${pool.names.queue}-dead/${dead}`);
    expect(one.body.status).toBe('failed');
  });

  it('shows dates for the times in job data, and an edit stores them as they were', async () => {
    const { body } = await api(`/api/queues/${pool.names.queue}/${ok}`);
    const shownAt = body.job.data.enqueuedAt as string;
    const job = await pool.job(ok);
    expect(shownAt).toBe(new Date(job!.data.enqueuedAt).toISOString());
    const letter = (await api(`/api/queues/${pool.names.queue}-dead/${dead}`)).body.job.data;
    expect(letter.deadAt).toMatch(/^\d{4}-\d\d-\d\dT[\d:.]+Z$/);
    expect(letter.attempts[0].at).toMatch(/^\d{4}-\d\d-\d\dT[\d:.]+Z$/);
    const edited = { ...body.job.data, meta: { note: 'looked at' } };
    const put = await api(`/api/queues/${pool.names.queue}/${ok}/update-data`, {
      method: 'PATCH',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jobData: edited }),
    });
    expect(put.status).toBe(200);
    const stored = (await pool.job(ok))!.data as JobData;
    expect(stored.meta).toEqual({ note: 'looked at' });
    expect(stored.enqueuedAt).toBe(job!.data.enqueuedAt);
    expect(stored.request).toEqual(job!.data.request);
  });

  it('serves its page with llmq’s links and without a font from another origin', async () => {
    const res = await fetch(`${dashboard.baseUrl}/`, {
      headers: { ...bearer, accept: 'text/html' },
    });
    const html = await res.text();
    expect(html).not.toMatch(/fonts\.googleapis|fonts\.gstatic/);
    expect(html).toContain('data-testid="nav-overview"');
    expect(html).toContain('href="llmq-static/board.css"');
    const css = await fetch(`${dashboard.baseUrl}/llmq-static/board.css`, { headers: bearer });
    expect(css.headers.get('content-type')).toMatch(/^text\/css/);
    expect(await css.text()).toContain('.llmq-nav');
  });

  it('read-only: the bar says so, and a dead letter is not retried', async () => {
    const ro = await startDashboard({
      redis: pool.redis,
      prefix: pool.names.prefix,
      port: 0,
      auth: { token: TOKEN },
      readOnly: true,
    });
    try {
      const page = await fetch(`${ro.baseUrl}/`, { headers: { ...bearer, accept: 'text/html' } });
      expect(await page.text()).toContain('data-testid="nav-read-only"');
      const overview = await fetch(`${ro.baseUrl}/overview`, { headers: bearer });
      expect(await overview.text()).toContain('data-testid="nav-read-only"');
      const retry = await fetch(`${ro.baseUrl}/api/queues/${pool.names.queue}-dead/${dead}/retry`, {
        method: 'PUT',
        headers: bearer,
      });
      expect(retry.status).toBe(403);
      expect(await pool.dlq.getJobCountByTypes('wait')).toBe(1);
    } finally {
      await ro.close();
    }
  });

  it('retries a dead letter from Bull Board as llmq dlq retry does', async () => {
    const res = await api(`/api/queues/${pool.names.queue}-dead/${dead}/retry`, { method: 'PUT' });
    expect(res.status).toBe(204);
    expect(await pool.dlq.getJobCountByTypes('wait')).toBe(0);
    expect(['wait', 'prioritized']).toContain(await pool.queue.getJobState(dead));
    expect((await pool.job(dead))!.data.history).toEqual([]);
  });

  it('keeps a failed job without a letter under failed', async () => {
    // Dead-letter it again, then purge the letter: the failed job is all that is left of it.
    worker = await pool.worker({ concurrency: 1 });
    await until(async () => (await pool.dlq.getJobCountByTypes('wait')) === 1, 20_000);
    await worker.stop(5_000);
    expect((await board()).main.counts.failed).toBe(0);
    expect(await purgeDeadLetters(pool.dlq)).toBe(1);
    const { main, letters } = await board();
    expect(main.counts.failed).toBe(1);
    expect(letters.counts.failed).toBe(0);
    const list = await api(
      `/api/queues?activeQueue=${pool.names.queue}&status=failed&page=1&jobsPerPage=10`,
    );
    const shown = list.body.queues.find((q: { name: string }) => q.name === pool.names.queue);
    expect(shown.jobs.map((j: { id: string }) => j.id)).toEqual([dead]);
  });
});
