import type { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { countRedisCommands } from '../scripts/bench/command-counter.ts';
import type { QueueNames } from '../shared/keys.ts';
import {
  COUNT_FIELDS_PER_CALL,
  countChunks,
  MetricsWriter,
  readMetrics,
} from '../shared/metrics.ts';
import { readHistograms } from '../shared/telemetry/histograms.ts';
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

  it("many tenants' counters go in several bounded commands, each series whole, none lost", async () => {
    const metrics = new MetricsWriter(redis, names);
    await countFromNow();
    const observe = (i: number) =>
      metrics.observe(
        { model: 'claude-a', tenant: `t${i}`, ok: true, waitMs: 5, callMs: 300, inputTokens: 99 },
        { completed: 1 },
      );
    // 45 tenants, three histograms each: three fields a value, some 400 fields in all.
    await Promise.all(Array.from({ length: 45 }, (_, i) => observe(i)));
    expect(writes()).toBeGreaterThan(1);
    const counters = await readMetrics(redis, names);
    expect(counters['completed']).toBe(45);
    const series = readHistograms(counters).filter((h) => h.name === 'call');
    expect(series).toHaveLength(45);
    for (const h of series) expect(h).toMatchObject({ count: 1, sum: 300 });
  });

  it('splits fields into calls of a bounded size without cutting a series', () => {
    const add: Record<string, number> = { completed: 3 };
    for (let t = 0; t < 100; t++)
      for (const f of ['b_100', 'b_500', 'sum', 'count']) add[`h|call|m|t${t}|${f}`] = 1;
    const chunks = countChunks(add);
    expect(chunks.length).toBeGreaterThan(1);
    const seen = new Map<string, number>();
    chunks.forEach((chunk, i) => {
      expect(chunk.length / 2).toBeLessThanOrEqual(COUNT_FIELDS_PER_CALL + 3);
      for (let j = 0; j < chunk.length; j += 2) {
        const field = String(chunk[j]);
        const series = field.slice(0, field.lastIndexOf('|'));
        expect(seen.get(series) ?? i).toBe(i);
        seen.set(series, i);
      }
    });
    expect(chunks.flat().length / 2).toBe(Object.keys(add).length);
  });
});
