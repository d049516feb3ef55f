import { describe, expect, it } from 'vitest';
import { Limiter } from '../shared/limiter/limiter.ts';
import { allCompleted, poolsPerTest, request } from './fixtures/worker-harness.ts';

const openTestPool = poolsPerTest();

describe('a 429 with retry-after', () => {
  it('pauses every worker of two processes and costs no attempt', async () => {
    // The provider allows 2000 tokens per 2 s; the workers believe 8000, so the first burst
    // of eight concurrent calls (about 380 tokens each) meets 429s with retry-after.
    const windowMs = 2_000;
    const pool = await openTestPool('pause', {
      windowMs,
      limits: { tokens: 2_000 },
      latencyMs: 50,
    });
    const limiter = new Limiter({ redis: pool.redis, names: pool.names, windowMs });
    const pauses: { at: number; until: number | null }[] = [];
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const s = await limiter.snapshot();
        pauses.push({ at: Date.now(), until: s.pausedUntil });
        await new Promise((r) => setTimeout(r, 10));
      }
    })();

    // Each process talks to the provider through its own recording proxy.
    const a = await pool.recordingProxy();
    const b = await pool.recordingProxy();
    const config = { concurrency: 4, limiter: { windowMs, limits: { tokens: 8_000 } } };
    await Promise.all([
      pool.workerProcess({ ...config, baseURL: a.url }),
      pool.workerProcess({ ...config, baseURL: b.url }),
    ]);
    // The jobs arrive together once both processes are up, so both take part in the burst
    // (one by one, a loaded machine may let each finish before the next arrives).
    const ids = await pool.producer.enqueueMany(
      Array.from({ length: 10 }, (_, i) => request(`Job ${i}: say hi.`, 370)),
    );

    await allCompleted(pool, ids, 30_000);
    watching = false;
    await watcher;

    const stats = pool.mock.stats();
    expect(stats.responses['429']).toBeGreaterThan(0);
    // Both processes called the provider.
    expect(a.calls.length).toBeGreaterThan(0);
    expect(b.calls.length).toBeGreaterThan(0);

    // The shared pause was set…
    const first = pauses.find((p) => p.until !== null);
    expect(first, 'the limiter never showed a pause').toBeDefined();
    // …and, once the calls already under way when it was set had arrived, no call of either
    // process reached the provider until it ended.
    const settledAt = first!.at + 500;
    const seen = pauses.find((p) => p.at >= settledAt)!;
    expect(seen.until, 'the pause ended within 500 ms').not.toBeNull();
    const quietFrom = settledAt;
    const quietTo = seen.until! - 30;
    expect(quietTo - quietFrom).toBeGreaterThan(300);
    for (const [name, proxy] of [
      ['a', a],
      ['b', b],
    ] as const) {
      const during = proxy.calls.filter((c) => c.at > quietFrom && c.at < quietTo);
      expect(during, `process ${name} called during the pause`).toEqual([]);
      expect(
        proxy.calls.some((c) => c.at >= quietTo),
        `process ${name} never called after the pause`,
      ).toBe(true);
    }

    // Every job completed on its first counted attempt; the 429s are in the history, uncounted.
    let limited = 0;
    for (const id of ids) {
      const job = (await pool.job(id))!;
      expect(job.returnvalue.attempts).toBe(1);
      const history = job.data.history ?? [];
      for (const h of history) {
        expect(h).toMatchObject({ outcome: 'rate_limited', counted: false, status: 429 });
      }
      if (history.length > 0) limited++;
      expect(job.data.rateLimitReturns ?? 0).toBe(history.length);
    }
    expect(limited).toBeGreaterThan(0);
    expect(await pool.deadLetters()).toEqual([]);
  });
});
