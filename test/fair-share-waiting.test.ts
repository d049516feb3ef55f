import { afterEach, describe, expect, it } from 'vitest';
import { fairJobsKey, fairTenantsKey } from '../shared/keys.ts';
import { retryDeadLetter } from '../worker/dead-letters.ts';
import { allCompleted, bullKey, openPool, type Pool, request } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

let pool: Pool | undefined;
afterEach(async () => {
  await pool?.cleanup();
  pool = undefined;
});

/** What fair share's index holds: each tenant's job ids, and the tenants listed as waiting. */
async function indexOf(p: Pool, tenants: readonly string[]) {
  const jobs: Record<string, string[]> = {};
  for (const t of tenants) jobs[t] = await p.redis.zrange(fairJobsKey(p.names, t), '0', '-1');
  return { jobs, tenants: await p.redis.zrange(fairTenantsKey(p.names), '0', '-1') };
}

/** The ids in the order their jobs started. */
async function startOrder(p: Pool, ids: readonly string[]): Promise<string[]> {
  const jobs = await Promise.all(ids.map(async (id) => (await p.job(id))!));
  return jobs.sort((a, b) => a.processedOn! - b.processedOn!).map((j) => j.id!);
}

/** Thirty jobs of tenant a, enqueued behind whatever waits. */
async function backlogOfA(p: Pool): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < 30; i++) {
    ids.push(await p.producer.enqueue(request(`a ${i}.`, 20), { tenant: 'a' }));
  }
  return ids;
}

/** A worker whose calls fail fast and come back soon; the breaker never opens. */
const failing = {
  backoff: { baseMs: 20, capMs: 50 },
  breaker: { threshold: 1_000 },
  fairShare: {},
} as const;

describe("fair share's index holds waiting jobs only", () => {
  it('keeps no entry of jobs completed by a worker without fair share', async () => {
    pool = await openPool('fair-wait-off');
    const ids = [
      await pool.producer.enqueue(request('one.', 20)),
      await pool.producer.enqueue(request('two.', 20)),
      await pool.producer.enqueue(request('three.', 20), { tenant: 't' }),
    ];
    // While they wait, the index holds them (a fair-share worker may come).
    expect(await indexOf(pool, ['', 't'])).toEqual({
      jobs: { '': [ids[0], ids[1]], t: [ids[2]] },
      tenants: expect.arrayContaining(['', 't']),
    });
    await pool.worker({ concurrency: 2 });
    await allCompleted(pool, ids);
    await until(async () => (await indexOf(pool!, ['', 't'])).tenants.length === 0, 5_000);
    expect(await indexOf(pool, ['', 't'])).toEqual({ jobs: { '': [], t: [] }, tenants: [] });
  });

  it('keeps no entry of jobs completed by workers with and without fair share together', async () => {
    pool = await openPool('fair-wait-on');
    const tenants = ['', 'x', 'y'];
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) {
      const tenant = tenants[i % 3] || undefined;
      ids.push(await pool.producer.enqueue(request(`${i} for ${tenant}.`, 20), { tenant }));
    }
    // A fleet half updated to fair share: both take from the queue.
    await pool.worker({ concurrency: 2, fairShare: {} });
    await pool.worker({ concurrency: 2 });
    await allCompleted(pool, ids);
    await until(async () => (await indexOf(pool!, tenants)).tenants.length === 0, 5_000);
    expect(await indexOf(pool, tenants)).toEqual({ jobs: { '': [], x: [], y: [] }, tenants: [] });
  });

  it("serves a retried job in its tenant's turn, not behind another tenant's backlog", async () => {
    pool = await openPool('fair-wait-retry', { faults: { overloaded: 1 } });
    const first = await pool.worker({ ...failing, concurrency: 1 });
    const b = await pool.producer.enqueue(request('b.', 20), {
      tenant: 'b',
      attempts: 50,
      retryForMs: 0,
    });
    // It failed and waits to be tried again; due by the time the backlog is there.
    await until(async () => (await pool!.queue.getJobState(b)) === 'delayed', 15_000);
    await first.stop(5_000);
    expect(await pool.queue.getJobState(b)).toBe('delayed');
    const delayed = bullKey(pool.names, 'delayed');
    await until(async () => Number(await pool!.redis.zscore(delayed, b)) / 4096 < Date.now());

    const backlog = await backlogOfA(pool);
    pool.mock.setFaults({});
    await pool.worker({ ...failing, concurrency: 1 });
    await allCompleted(pool, [b, ...backlog], 60_000);
    // Its promotion puts it behind a's 30 jobs; fair share serves it within a's first few.
    expect((await startOrder(pool, [b, ...backlog])).indexOf(b)).toBeLessThan(5);
  }, 90_000);

  it("serves a retried dead letter in its tenant's turn, not behind another tenant's backlog", async () => {
    pool = await openPool('fair-wait-dead', { faults: { overloaded: 1 } });
    const first = await pool.worker({ ...failing, concurrency: 1 });
    const b = await pool.producer.enqueue(request('b.', 20), {
      tenant: 'b',
      attempts: 1,
      retryForMs: 0,
    });
    await until(async () => (await pool!.queue.getJobState(b)) === 'failed', 15_000);
    await first.stop(5_000);

    const backlog = await backlogOfA(pool);
    pool.mock.setFaults({});
    expect(await retryDeadLetter(pool.dlq, pool.queue, b)).toBe(b);
    expect((await indexOf(pool, ['b'])).jobs['b']).toEqual([b]);
    await pool.worker({ ...failing, concurrency: 1 });
    await allCompleted(pool, [b, ...backlog], 60_000);
    expect((await startOrder(pool, [b, ...backlog])).indexOf(b)).toBeLessThan(5);
  }, 90_000);
});
