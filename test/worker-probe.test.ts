import { afterEach, describe, expect, it } from 'vitest';
import { Limiter } from '../shared/limiter/limiter.ts';
import { allCompleted, openPool, type Pool, request } from './fixtures/worker-harness.ts';
import { markProbeDue } from './helpers.ts';

let pool: Pool | undefined;
afterEach(async () => {
  await pool?.cleanup();
  pool = undefined;
});

const WINDOW = 60_000;
const LIMITS = { tokens: 10_000 };
// Long enough that 'within half of it' holds on a loaded machine, and fails without the fix.
const LATENCY = 5_000;

describe('a probe in the worker', () => {
  it('releases the jobs held behind it when its response begins, not when its call ends', async () => {
    // Streamed answers: the headers come at once, the answer 5 s later.
    pool = await openPool('probe', { latencyMs: LATENCY, limits: { tokens: 100_000 } });
    const limiter = new Limiter({
      redis: pool.redis,
      names: pool.names,
      windowMs: WINDOW,
      limits: LIMITS,
      headroom: 0,
    });
    // Another client of the key spent 2,500 (as the provider reported), and a waiter was
    // denied for budget beside it, then left: the next admission after that goes as a probe.
    await markProbeDue(limiter, LIMITS.tokens);

    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push(await pool.producer.enqueue(request(`Job ${i}.`, 100)));
    await pool.worker({
      concurrency: 3,
      limiter: { windowMs: WINDOW, limits: LIMITS, headroom: 0 },
    });
    await allCompleted(pool, ids, 30_000);

    expect((await limiter.snapshot()).counters.probes).toBe(1);
    const started = (
      await Promise.all(ids.map(async (id) => (await pool!.job(id))!.processedOn!))
    ).sort((a, b) => a - b);
    // The first went alone; the other two followed its reading within moments, long before its
    // 5 s answer ended.
    expect(started[2]! - started[0]!).toBeLessThan(LATENCY - 1_000);
  });
});
