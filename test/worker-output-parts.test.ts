import { afterEach, describe, expect, it } from 'vitest';
import { allCompleted, openPool, type Pool, request } from './fixtures/worker-harness.ts';

let pool: Pool | undefined;
afterEach(async () => {
  await pool?.cleanup();
  pool = undefined;
});

describe("a streamed answer under 'actual' accounting", () => {
  it('gives its output room back a part at a time, from when each part arrived', async () => {
    // 400 tokens at 2.5 ms each: the answer streams for about a second.
    pool = await openPool('outparts', {
      latencyMs: 0,
      latencyPerOutputTokenMs: 2.5,
      outputShare: 1,
      outputAccounting: 'actual',
    });
    const windowMs = 30_000;
    const worker = await pool.worker({
      concurrency: 1,
      limiter: {
        windowMs,
        outputAccounting: 'actual',
        headroom: 0,
        limits: { outputTokens: 1_000 },
      },
    });
    const id = await pool.producer.enqueue(request('Write at length.', 400));
    await allCompleted(pool, [id]);

    const lim = worker.limiter;
    const logKey = lim.allKeys.find((k) => k.endsWith(':log'))!;
    const log = await pool.redis.zrange(logKey, '0', '-1', 'WITHSCORES');
    const stamps = new Map<string, number>();
    for (let i = 0; i < log.length; i += 2)
      stamps.set(log[i]!.replace(/^[^:]*/, ''), Number(log[i + 1]));
    // The input from the response's start, three parts of the output as they came, the rest
    // at the end.
    expect([...stamps.keys()].sort()).toEqual(['', ':in', ':o1', ':o2', ':o3']);
    const at = (k: string) => stamps.get(k)!;
    expect(at(':in')).toBeLessThan(at(':o1'));
    expect(at(':o1')).toBeLessThan(at(':o2'));
    expect(at(':o2')).toBeLessThan(at(':o3'));
    expect(at(':o3')).toBeLessThan(at(''));
    expect(at('') - at(':in')).toBeGreaterThan(700);
    expect(at(':o1') - at(':in')).toBeGreaterThan(100);
    expect(at('') - at(':o3')).toBeGreaterThan(100);

    // All 400 are counted; a call that needs a few of them back waits for the first part to
    // leave the window, not for the end's.
    const snap = await lim.snapshot();
    expect(snap.scopes[0]!.dimensions.outputTokens.used).toBe(400);
    const d = await lim.tryAcquire({ requests: 1, inputTokens: 10, outputTokens: 610 });
    if (d.ok) throw new Error('expected a wait for the output room');
    expect(d.dimension).toBe('outputTokens');
    const now = snap.now;
    expect(d.waitMs).toBeLessThan(at(':o1') + windowMs + 100 - now);
    expect(d.waitMs).toBeLessThan(at('') + windowMs - now - 500);
    expect(pool.mock.stats().attempts).toBe(1);
  });
});
