import { describe, expect, it } from 'vitest';
import { allCompleted, poolsPerTest, request } from './fixtures/worker-harness.ts';
import { watchHighest } from './helpers.ts';

const openTestPool = poolsPerTest();

/** The most calls under way at the provider at once while two workers at concurrency 2 drain 10 jobs. */
async function mostAtOnce(maxInFlight?: number): Promise<number> {
  const pool = await openTestPool('maxinflight', { latencyMs: 400 });
  const proxy = await pool.recordingProxy();
  const ids: string[] = [];
  for (let i = 0; i < 10; i++) ids.push(await pool.producer.enqueue(request(`Item ${i}.`)));
  const calls = proxy.calls;
  const atProvider = watchHighest(
    () => calls.filter((c) => !c.done && c.status !== 'dropped').length,
  );
  const options = {
    baseURL: proxy.url,
    concurrency: 2,
    limiter: { windowMs: 5_000, limits: { tokens: 1_000_000 } },
    ...(maxInFlight === undefined ? {} : { maxInFlight }),
  };
  await Promise.all([pool.worker(options), pool.worker(options)]);
  await allCompleted(pool, ids, 30_000);
  return atProvider.stop();
}

describe('concurrency and max-in-flight', () => {
  it('runs each worker’s `concurrency` calls: two workers at 2 run 4 at once', async () => {
    expect(await mostAtOnce()).toBe(4);
  });

  it('caps the calls of every worker together at `maxInFlight`', async () => {
    expect(await mostAtOnce(3)).toBe(3);
  });
});
