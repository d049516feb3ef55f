import { describe, expect, it } from 'vitest';
import { llmqKey } from '../shared/keys.ts';
import {
  allCompleted,
  bullKey,
  type Pool,
  poolsPerTest,
  request,
} from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const openTestPool = poolsPerTest();

interface Sample {
  readonly at: number;
  readonly active: number;
  readonly waiting: number;
  /** Jobs BullMQ moved to active so far (the sum of every job's attemptsStarted). */
  readonly started: number;
  /** Reservations the limiter admitted so far. */
  readonly admitted: number;
  /** Workers waiting in the limiter's line. */
  readonly waiters: number;
}

/** Reads BullMQ's and the limiter's state in one MULTI, so each sample is one instant. */
async function sample(p: Pool, ids: readonly string[]): Promise<Sample> {
  const m = p.redis
    .multi()
    .llen(bullKey(p.names, 'active'))
    .llen(bullKey(p.names, 'wait'))
    .zcard(bullKey(p.names, 'prioritized'))
    .hget(llmqKey(p.names, 'limiter', 'stats'), 'admitted')
    .zcard(llmqKey(p.names, 'limiter', 'waiters'));
  for (const id of ids) m.hget(bullKey(p.names, id), 'ats');
  const rows = ((await m.exec()) ?? []).map(([err, v]) => {
    if (err) throw err;
    return v;
  });
  const [active, wait, prio, admitted, waiters, ...ats] = rows as [
    number,
    number,
    number,
    string | null,
    number,
    ...(string | null)[],
  ];
  return {
    at: Date.now(),
    active,
    waiting: wait + prio,
    started: ats.reduce((s: number, a) => s + Number(a ?? 0), 0),
    admitted: Number(admitted ?? 0),
    waiters,
  };
}

describe('the gate takes budget before it pulls a job', () => {
  it('never moves a job to active without a reservation, and a later urgent job starts first', async () => {
    // 1000 tokens per 2 s on both sides; each job reserves about 400 (input estimate plus
    // max_tokens), so the pool runs two jobs a window and waits on budget in between.
    const windowMs = 2_000;
    const pool = await openTestPool('gate', { windowMs, limits: { tokens: 1_000 }, latencyMs: 30 });
    const req = (i: number) => request(`Count to three, job ${i}.`, 370);
    const low: string[] = [];
    for (let i = 0; i < 6; i++)
      low.push(await pool.producer.enqueue(req(i), { priority: 'batch' }));
    expect((await pool.job(low[0]!))!.data.cost.inputTokens + 370).toBeGreaterThan(380);

    const all = [...low];
    const samples: Sample[] = [];
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        samples.push(await sample(pool!, all));
        await new Promise((r) => setTimeout(r, 5));
      }
    })();

    await pool.worker({ concurrency: 4, limiter: { windowMs, limits: { tokens: 1_000 } } });
    // Wait until the first window is spent and the pool waits on budget with jobs left.
    await until(async () => (await pool!.counts()).completed >= 2, 15_000);
    const waitingForBudget = await sample(pool, all);
    expect(waitingForBudget.waiting).toBeGreaterThanOrEqual(3);

    const urgent = await pool.producer.enqueue(req(99), { priority: 'interactive' });
    all.push(urgent);
    const notStarted: string[] = [];
    for (const id of low) if (!(await pool.job(id))!.processedOn) notStarted.push(id);
    expect(notStarted.length).toBeGreaterThanOrEqual(2);

    await allCompleted(pool, all, 30_000);
    sampling = false;
    await sampler;

    // Every activation was preceded by an admission, at every instant sampled.
    const bad = samples.filter((s) => s.started > s.admitted);
    expect(bad, JSON.stringify(bad.slice(0, 3))).toEqual([]);
    // While the pool waited on budget, the jobs stayed in wait, not active.
    const waitedIdle = samples.filter((s) => s.waiters > 0 && s.waiting > 0 && s.active === 0);
    expect(waitedIdle.length).toBeGreaterThan(10);
    // At most what the budget admits ran at once.
    expect(Math.max(...samples.map((s) => s.active))).toBeLessThanOrEqual(2);

    // The urgent job, enqueued last, started before every older job that had not started (or
    // in the same millisecond: the gate fills free slots in one round trip, the head first).
    const urgentStart = (await pool.job(urgent))!.processedOn!;
    for (const id of notStarted)
      expect((await pool.job(id))!.processedOn!).toBeGreaterThanOrEqual(urgentStart);

    // The provider never refused: the window and the provider's agree.
    const stats = pool.mock.stats();
    expect(stats.rateLimited.tokens).toBe(0);
    expect(stats.worstWindow.tokens).toBeLessThanOrEqual(1_000);
    expect(stats.admitted).toBe(7);
  });

  it('holds still while the queue is paused (no budget reserved, nothing started), and resumes', async () => {
    const pool = await openTestPool('gatepause');
    await pool.queue.pause();
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push(await pool.producer.enqueue(request(`Paused ${i}.`)));
    const worker = await pool.worker({ limiter: { windowMs: 5_000, limits: { tokens: 100_000 } } });
    await new Promise((r) => setTimeout(r, 1_000));
    const snap = await worker.limiter.snapshot();
    expect(snap.counters.admitted).toBe(0);
    expect(snap.inFlight).toBe(0);
    expect((await pool.counts()).active).toBe(0);
    expect(pool.mock.stats().attempts).toBe(0);

    await pool.queue.resume();
    await allCompleted(pool, ids, 15_000);
  });
});
