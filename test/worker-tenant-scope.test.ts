import { describe, expect, it } from 'vitest';
import { readMetrics } from '../shared/metrics.ts';
import { allCompleted, poolsPerTest, request } from './fixtures/worker-harness.ts';

const openTestPool = poolsPerTest();

describe('a tenant at its own limit', () => {
  it('does not hold back the other tenants queued behind it, and its jobs finish once its budget frees', async () => {
    const pool = await openTestPool('tenant-scope');
    const worker = await pool.worker({
      limiter: {
        windowMs: 2_000,
        headroom: 0,
        limits: { tokens: 100_000 },
        // tenant:slow fits one call (~60 tokens reserved) per 2 s window.
        scopes: { 'tenant:slow': { tokens: 100 } },
      },
      concurrency: 4,
      // The estimate as is: learned (about half of it here), two calls would fit a window.
      learnEstimates: false,
    });
    const slow: string[] = [];
    for (let i = 0; i < 4; i++)
      slow.push(await pool.producer.enqueue(request(`slow ${i}`, 40), { tenant: 'slow' }));
    const fast: string[] = [];
    for (let i = 0; i < 6; i++)
      fast.push(await pool.producer.enqueue(request(`fast ${i}`, 40), { tenant: 'fast' }));

    // Every job of the other tenant is done long before the slow tenant's window lets its
    // remaining jobs through (one per 2 s window: about 6 s for all four).
    await allCompleted(pool, fast, 15_000);
    const slowDone = await Promise.all(
      slow.map(async (id) => (await pool!.job(id))?.finishedOn ?? null),
    );
    expect(slowDone.filter((t) => t !== null).length).toBeLessThan(slow.length);

    await allCompleted(pool, slow, 30_000);
    // Stepping around costs the slow tenant's jobs no attempt and sends none to the dead letters.
    for (const id of slow) expect((await pool.job(id))!.returnvalue.attempts).toBe(1);
    expect(await pool.deadLetters()).toEqual([]);
    expect((await readMetrics(pool.redis, pool.names))['deferred_by_scope'] ?? 0).toBeGreaterThan(
      0,
    );
    // And the scope's own limit held: no 2 s window admitted more than one of its calls.
    const starts = (
      await Promise.all(slow.map(async (id) => (await pool!.job(id))!.processedOn!))
    ).sort((a, b) => a - b);
    for (let i = 1; i < starts.length; i++)
      expect(starts[i]! - starts[i - 1]!).toBeGreaterThanOrEqual(1_500);
    await worker.stop(1_000);
  });
});
