import type { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { countRedisCommands } from '../scripts/bench/command-counter.ts';
import type { QueueNames } from '../shared/keys.ts';
import { MetricsWriter, readMetrics } from '../shared/metrics.ts';
import { eachTestRedis, nextTurn } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
eachTestRedis('metrics', (r, n) => {
  redis = r;
  names = n;
});

let counter: Awaited<ReturnType<typeof countRedisCommands>> | undefined;
/** Counts from here on, once connected (a command sent while connecting is sent, and counted, twice). */
async function countFromNow() {
  await redis.ping();
  counter = await countRedisCommands();
}
afterEach(() => {
  counter?.restore();
  counter = undefined;
});
const writes = () => counter?.snapshot().commands['evalsha:llmq:count'] ?? 0;

describe("a worker's counters on their way to Redis", () => {
  it('the counters of calls that succeed in different turns go in one command, after the flush interval', async () => {
    // Long enough that no slow turn of a loaded machine lets the timer fire between the calls.
    const flushMs = 2_000;
    const metrics = new MetricsWriter(redis, names, { flushMs });
    await countFromNow();
    const began = performance.now();
    const written: Promise<void>[] = [];
    for (let i = 0; i < 5; i++) {
      written.push(metrics.latency(100 * (i + 1), { provider_ok: 1, completed: 1, tokens_in: 10 }));
      await nextTurn();
    }
    expect(writes()).toBe(0);
    await Promise.all(written);
    const waited = performance.now() - began;
    expect(waited).toBeGreaterThanOrEqual(flushMs - 50);
    expect(waited).toBeLessThan(flushMs + 2_000);
    expect(writes()).toBe(1);
    expect(await readMetrics(redis, names)).toMatchObject({
      provider_ok: 5,
      completed: 5,
      tokens_in: 50,
      latency_count: 5,
      latency_sum_ms: 1_500,
    });
  });

  it('a failure is counted at the end of its turn and takes the waiting counters along', async () => {
    const metrics = new MetricsWriter(redis, names);
    await countFromNow();
    const ok = metrics.latency(200, { provider_ok: 1, completed: 1 });
    await nextTurn();
    const retried = metrics.add({ provider_calls: 1, provider_5xx: 1, retries: 1 });
    await nextTurn();
    await nextTurn();
    expect(writes()).toBe(1);
    await Promise.all([ok, retried]);
    expect(writes()).toBe(1);
    expect(await readMetrics(redis, names)).toMatchObject({
      provider_ok: 1,
      completed: 1,
      retries: 1,
      provider_5xx: 1,
    });
  });
});
