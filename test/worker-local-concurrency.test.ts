import { afterEach, describe, expect, it } from 'vitest';
import { allCompleted, openPool, type Pool, request } from './fixtures/worker-harness.ts';
import { watchHighest } from './helpers.ts';

let pool: Pool | undefined;
const warnings: string[] = [];
const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
afterEach(async () => {
  process.off('warning', onWarning);
  await pool?.cleanup();
  pool = undefined;
});

describe('a worker’s own concurrency', () => {
  it('runs at most `concurrency` calls at once and waits for a slot without piling up listeners', async () => {
    process.on('warning', onWarning);
    pool = await openPool('localconc', { latencyMs: 30 });
    const ids: string[] = [];
    for (let i = 0; i < 16; i++) ids.push(await pool.producer.enqueue(request(`Item ${i}.`)));
    const worker = await pool.worker({
      concurrency: 2,
      limiter: { windowMs: 5_000, limits: { tokens: 1_000_000 } },
    });
    const inFlight = watchHighest(() => worker.inFlight());
    await allCompleted(pool, ids, 20_000);
    const most = inFlight.stop();

    expect(most).toBe(2);
    expect(pool.mock.stats().attempts).toBe(16);
    // No "possible EventTarget memory leak" from waiting for a slot 14 times.
    expect(warnings.filter((w) => /listener/i.test(w))).toEqual([]);
  });
});
