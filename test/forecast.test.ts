import { describe, expect, it } from 'vitest';
import { forecastDrain } from '../shared/forecast.ts';
import { formatForecast } from '../shared/forecast-format.ts';
import { getQueueStatus } from '../shared/status.ts';
import { allCompleted, poolsPerTest, request } from './fixtures/worker-harness.ts';
import { testLimiter } from './helpers.ts';

const openTestPool = poolsPerTest();

/** A dimension's use as the view reads it at headroom 0: the room is what the limit leaves. */
const use = (used: number, limit: number | undefined) => ({
  used,
  limit,
  providerLimit: undefined,
  providerRoom: undefined,
  room: limit === undefined ? undefined : limit - used,
  perWindow: limit,
});
const dims = (outputLimit: number, outputUsed = 0) => ({
  requests: use(0, undefined),
  inputTokens: use(0, 100_000),
  outputTokens: use(outputUsed, outputLimit),
  tokens: use(0, undefined),
});

describe('forecast', () => {
  it('drains classes in priority order and names the dimension that binds', () => {
    const f = forecastDrain(
      [
        { priority: 1_000, jobs: 30, inputTokens: 3_000, outputTokens: 3_000 },
        { priority: 10, jobs: 5, inputTokens: 500, outputTokens: 500 },
      ],
      {
        windowMs: 60_000,
        scopes: [
          { scope: 'global', shape: 'unknown', roundingStep: 0, dimensions: dims(1_000, 200) },
        ],
      },
    );
    // interactive: 500 fits in the 800 left now; then 3,500 in all: 2,700 past now, 2.7 windows.
    expect(f.classes.map((c) => [c.lane, c.drainMs, c.binding])).toEqual([
      ['interactive', 0, null],
      ['batch', 162_000, 'outputTokens'],
    ]);
    expect(formatForecast(f)).toEqual([
      '  forecast at the current limits (window 60 s):',
      '    interactive (10): 5 jobs, starts now (no limit holds it back)',
      '    batch (1000): 30 jobs, started within 2 min 42 s, bound by output tokens',
    ]);
  });

  it('a backlog bound by output tokens drains in the forecast order, no sooner than its windows allow', async () => {
    // Each call spends its whole max_tokens (no refund at settle), as the forecast assumes.
    const pool = await openTestPool('forecast', { latencyMs: 20, outputShare: 1 });
    const limits = { outputTokens: 1_000 };
    const windowMs = 3_000;
    await pool.worker({ limiter: { limits, windowMs, headroom: 0 } });
    // Tiny calls first: the fleet's latency is known, the connections are warm.
    for (const n of [5, 10]) {
      const warm = await pool.producer.enqueueMany(
        Array.from({ length: n }, (_, i) => request(`warm ${n} ${i}`, 1)),
      );
      await allCompleted(pool, warm, 15_000);
    }
    // The backlog builds while the queue is paused, as if the workers had fallen behind.
    await pool.queue.pause();
    const ids = [
      ...(await pool.producer.enqueueMany(
        Array.from({ length: 40 }, (_, i) => request(`batch ${i}`, 100)),
        { priority: 'batch' },
      )),
      ...(await pool.producer.enqueueMany(
        Array.from({ length: 9 }, (_, i) => request(`urgent ${i}`, 100)),
        { priority: 'interactive' },
      )),
    ];
    const reader = testLimiter({ redis: pool.redis, names: pool.names, limits, windowMs });
    const f = (await getQueueStatus(pool.redis, pool.names, reader)).forecast;
    expect(f.binding).toBe('outputTokens');
    expect(f.classes.map((c) => [c.lane, c.jobs, c.binding])).toEqual([
      ['interactive', 9, null],
      ['batch', 40, 'outputTokens'],
    ]);
    // 4,900 output tokens at 1,000 a window, about 1,000 of them now (15 spent warming up): some 4 windows more.
    expect(f.drainMs).toBeGreaterThan(11_700);

    const resumedAt = Date.now();
    await pool.queue.resume();
    await allCompleted(pool, ids, 30_000);
    const starts = await Promise.all(ids.map(async (id) => (await pool!.job(id))!.processedOn!));
    const drained = Math.max(...starts) - resumedAt;
    console.log(`forecast ${f.drainMs} ms, drained in ${drained} ms`);
    // The classes drained in the order forecast: every urgent job started before any batch job.
    expect(Math.max(...starts.slice(40))).toBeLessThanOrEqual(Math.min(...starts.slice(0, 40)));
    // And no sooner than the forecast's windows allow: its last thousand tokens start four
    // windows after the first (load only makes it later; how close to the forecast the drain
    // comes is the bench's to measure, against wall-clock time on an idle machine).
    expect(drained).toBeGreaterThanOrEqual(4 * windowMs - 300);
  });
});
