import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { readTenantJobs } from '../dashboard/tenant-jobs.ts';
import { Producer } from '../producer/producer.ts';
import {
  addCall,
  HISTORY_JOBS_PER_TENANT,
  HISTORY_MAX_MODELS,
  HISTORY_MAX_TENANTS,
  HISTORY_RANGES,
  HISTORY_TENANTS_PER_CALL,
  HISTORY_TIERS,
  type HistoryBatch,
  historyKeys,
  newBatch,
  splitByTenants,
  writeHistory,
} from '../shared/history.ts';
import {
  historyLabels,
  historyMemoryBytes,
  readRecentJobs,
  readUsageHistory,
} from '../shared/history-reader.ts';
import type { QueueNames } from '../shared/keys.ts';
import { MetricsWriter } from '../shared/metrics.ts';
import { eachTestRedis } from './helpers.ts';

/** The most one queue's history takes in Redis, as docs/dashboard.md states it. */
const STATED_MAX_BYTES = 6 * 1024 * 1024;
const T0 = Date.UTC(2026, 0, 5, 12, 0, 0);

const call = (over: Partial<Parameters<MetricsWriter['observe']>[0]> = {}) => ({
  model: 'claude-a',
  tenant: 'acme',
  waitMs: 100,
  callMs: 800,
  inputTokens: 300,
  outputTokens: 40,
  costMicros: 1_500,
  reservedInputTokens: 350,
  reservedOutputTokens: 200,
  ok: true,
  ...over,
});

/** Every key of the queue's history with its value, to see that a read changes none. */
async function dumpHistory(redis: Redis, names: QueueNames) {
  const k = historyKeys(names);
  const keys = [...k.tiers, k.tenants, k.models, k.jobs];
  return Promise.all(keys.map(async (key) => [key, await redis.dump(key)]));
}

describe('the usage history', () => {
  let redis: Redis;
  let names: QueueNames;
  eachTestRedis('hist', (r, n) => {
    redis = r;
    names = n;
  });

  it('records each call in every range, for the fleet, its tenant and its model', async () => {
    // A failed try's reservation is not compared with a usage: the worker gives none.
    const failed = { ok: false, reservedInputTokens: undefined, reservedOutputTokens: undefined };
    let now = T0;
    const metrics = new MetricsWriter(redis, names, { flushMs: 0, clock: () => now });
    await Promise.all([
      metrics.observe(call({ jobId: 'a1', waitMs: 100, callMs: 800 })),
      metrics.observe(call({ jobId: 'a2', waitMs: 3_000, callMs: 1_200, cacheWriteTokens: 50 })),
      metrics.observe(call({ jobId: 'b1', tenant: 'globex', model: 'claude-b', ...failed })),
      metrics.add({ provider_429_retry_after: 1, dead_lettered: 1, deferred_by_scope: 2 }),
    ]);
    now += 20_000;
    await metrics.observe(call({ jobId: 'b2', tenant: 'globex', model: 'claude-b' }));

    for (const range of ['15m', '1h', '24h'] as const) {
      const h = await readUsageHistory(redis, names, range, now);
      const by = Object.fromEntries(h.series.map((s) => [s.series, s.total]));
      expect(Object.keys(by)).toEqual(['*', 'm:claude-a', 'm:claude-b', 't:acme', 't:globex']);
      expect(by['*']).toMatchObject({ calls: 3, failed: 1, outputTokens: 160, spendUsd: 0.006 });
      // Cache writes count toward input limits: they are input here.
      expect(by['*']!.inputTokens).toBe(1_250);
      // What the calls that succeeded reserved at admission, beside what they used.
      expect(by['*']).toMatchObject({ reservedInputTokens: 1_050, reservedOutputTokens: 600 });
      expect(by['t:acme']).toMatchObject({ reservedInputTokens: 700, reservedOutputTokens: 400 });
      expect(by['*']).toMatchObject({ providerRateLimited: 1, deadLettered: 1, setBack: 2 });
      expect(by['t:acme']).toMatchObject({ calls: 2, failed: 0, spendUsd: 0.003 });
      expect(by['t:acme']!.providerRateLimited).toBe(0);
      expect(by['m:claude-b']).toMatchObject({ calls: 1, failed: 1 });
      expect(by['t:acme']!.latency).toMatchObject({ count: 2, meanMs: 1_000 });
      expect(by['t:acme']!.latency.p95).toBeGreaterThan(1_100);
      expect(by['t:acme']!.latency.p95).toBeLessThanOrEqual(1_200);
      expect(h.bucketMs).toBe(HISTORY_TIERS.find((t) => t.range === range)!.bucketMs);
    }
    // In 10 s buckets the two moments are two buckets; in 1 min buckets one.
    const fine = await readUsageHistory(redis, names, '15m', now);
    expect(fine.series[0]!.points.filter((p) => p.calls > 0).map((p) => p.calls)).toEqual([2, 1]);
    expect(fine.series[0]!.points).toHaveLength(90);
    expect(fine.to - fine.from).toBe(15 * 60_000);
    expect((await readRecentJobs(redis, names, 'globex')).map((j) => [j.id, j.ok])).toEqual([
      ['b2', true],
      ['b1', false],
    ]);
    expect(await historyLabels(redis, names)).toEqual({
      tenants: ['acme', 'globex'],
      models: ['claude-a', 'claude-b'],
    });
  });

  it('samples the backlog with each write, and a read writes nothing', async () => {
    const producer = new Producer({ redis, names });
    try {
      for (let i = 0; i < 3; i++)
        await producer.enqueue({
          model: 'claude-a',
          max_tokens: 10,
          messages: [{ role: 'user', content: 'hi' }],
        });
      const metrics = new MetricsWriter(redis, names, { flushMs: 0, clock: () => T0 });
      await metrics.observe(call());
      const before = await dumpHistory(redis, names);
      const h = await readUsageHistory(redis, names, '1h', T0);
      expect(h.series[0]!.total.backlog).toBe(3);
      expect(h.series[0]!.points.at(-1)!.backlog).toBe(3);
      expect(await dumpHistory(redis, names)).toEqual(before);
    } finally {
      await producer.close();
    }
  });

  it("lists a tenant's own jobs waiting, of every job the queue holds", async () => {
    const producer = new Producer({ redis, names });
    const request = (model: string) => ({
      model,
      max_tokens: 10,
      messages: [{ role: 'user' as const, content: 'hi' }],
    });
    try {
      const mine = [
        await producer.enqueue(request('claude-a'), { tenant: 'acme' }),
        await producer.enqueue(request('claude-b'), { tenant: 'acme', priority: 'interactive' }),
      ];
      await producer.enqueue(request('claude-a'), { tenant: 'globex' });
      await producer.enqueue(request('claude-a'), { tenant: 'globex', priority: 'interactive' });
      const jobs = await readTenantJobs(redis, names, 'acme');
      expect(jobs.total).toBe(4);
      expect(jobs.scanned).toBe(4);
      expect(jobs.pending.map((j) => [j.id, j.state, j.model]).sort()).toEqual(
        [
          [mine[0], 'waiting', 'claude-a'],
          [mine[1], 'waiting', 'claude-b'],
        ].sort(),
      );
    } finally {
      await producer.close();
    }
  });

  it('adds to what an older build wrote (text buckets, JSON job lists), and reads both', async () => {
    const k = historyKeys(names);
    const slot = (i: number) => {
      const { bucketMs, slots } = HISTORY_TIERS[i]!;
      return Math.floor(T0 / bucketMs) % slots;
    };
    const start = (i: number) =>
      Math.floor(T0 / HISTORY_TIERS[i]!.bucketMs) * HISTORY_TIERS[i]!.bucketMs;
    for (let i = 0; i < 3; i++) {
      await redis.hset(k.tiers[i]!, `*|${slot(i)}`, `${start(i)};c=2;i=600`);
      await redis.hset(k.tiers[i]!, `t:acme|${slot(i)}`, `${start(i)};c=2;i=600`);
    }
    await redis.sadd(k.tenants, 't:acme');
    const older = [{ id: 'old-1', ok: true, at: T0 - 1, model: 'claude-a' }];
    await redis.hset(k.jobs, 't:acme', JSON.stringify(older));
    // A text bucket of a tier this build has not written yet is read as it is.
    await redis.hset(k.tiers[0]!, `t:acme|${(slot(0) + 89) % 90}`, `${start(0) - 10_000};c=5`);

    const batch = newBatch();
    addCall(batch, call({ jobId: 'new-1' }), T0);
    await writeHistory(redis, names, batch, T0);

    for (const range of HISTORY_RANGES) {
      const h = await readUsageHistory(redis, names, range, T0);
      const by = Object.fromEntries(h.series.map((s) => [s.series, s.total]));
      expect(by['*']).toMatchObject({ calls: 3, inputTokens: 900 });
      expect(by['t:acme']).toMatchObject({ calls: range === '15m' ? 8 : 3, inputTokens: 900 });
    }
    expect((await readRecentJobs(redis, names, 'acme')).map((j) => j.id)).toEqual([
      'new-1',
      'old-1',
    ]);
  });

  it('keeps one ring of buckets per range: older buckets are overwritten, keys expire', async () => {
    let now = T0;
    for (let i = 0; i < 200; i++) {
      const batch = newBatch();
      addCall(batch, call(), now);
      await writeHistory(redis, names, batch, now);
      now += 10_000;
    }
    const k = historyKeys(names);
    // 3 series (fleet, tenant, model), one field per slot of each tier at most.
    expect(await redis.hlen(k.tiers[0]!)).toBe(3 * 90);
    expect(await redis.hlen(k.tiers[1]!)).toBe(3 * 34);
    const h = await readUsageHistory(redis, names, '15m', now - 10_000);
    expect(h.series[0]!.total.calls).toBe(90);
    expect(await redis.pttl(k.tiers[0]!)).toBeLessThanOrEqual(91 * 10_000);
    expect(await redis.pttl(k.tiers[2]!)).toBeGreaterThan(24 * 3_600_000);
    expect(await redis.pttl(k.tenants)).toBeGreaterThan(0);
  });

  it('counts tenants and models past the caps as (other)', async () => {
    const batch = newBatch();
    for (let i = 0; i < HISTORY_MAX_TENANTS + 3; i++)
      addCall(batch, call({ tenant: `t${String(i).padStart(2, '0')}`, model: `m${i}` }), T0);
    await writeHistory(redis, names, batch, T0);
    const labels = await historyLabels(redis, names);
    expect(labels.tenants).toHaveLength(HISTORY_MAX_TENANTS);
    expect(labels.models).toHaveLength(HISTORY_MAX_MODELS);
    const h = await readUsageHistory(redis, names, '15m', T0);
    const by = Object.fromEntries(h.series.map((s) => [s.series, s.total.calls]));
    expect(by['*']).toBe(HISTORY_MAX_TENANTS + 3);
    expect(by['t:(other)']).toBe(3);
    expect(by['m:(other)']).toBe(HISTORY_MAX_TENANTS + 3 - HISTORY_MAX_MODELS);
  });

  it('writes a flush of 2,000 tenants in calls of a bounded number of tenants, none lost', async () => {
    // The busy tenant was seen before (it is kept by name); then 2,000 with one call each.
    const before = newBatch();
    addCall(before, call({ tenant: 'busy', jobId: 'b-1' }), T0);
    await writeHistory(redis, names, before, T0);
    const batch = newBatch();
    for (let i = 0; i < 30; i++) addCall(batch, call({ tenant: 'busy', jobId: `b${i}` }), T0);
    for (let i = 0; i < 2_000; i++) addCall(batch, call({ tenant: `s${i}`, jobId: `s${i}` }), T0);
    const parts = splitByTenants(batch);
    // No call's work grows with the tenants: each carries at most a fixed number of them.
    const tenantsIn = (b: HistoryBatch) => Object.keys(b.series).filter((n) => n.startsWith('t:'));
    expect(parts.length).toBeGreaterThan(2_000 / HISTORY_TENANTS_PER_CALL);
    for (const part of parts) {
      expect(tenantsIn(part).length).toBeLessThanOrEqual(HISTORY_TENANTS_PER_CALL);
      expect(part.jobs.length).toBeLessThanOrEqual(
        HISTORY_TENANTS_PER_CALL * HISTORY_JOBS_PER_TENANT,
      );
    }

    await writeHistory(redis, names, batch, T0);
    const h = await readUsageHistory(redis, names, '15m', T0);
    const by = Object.fromEntries(h.series.map((s) => [s.series, s.total.calls]));
    expect(by['*']).toBe(2_031);
    expect(by['t:busy']).toBe(31);
    expect(by['t:(other)']! + (HISTORY_MAX_TENANTS - 1)).toBe(2_000);
    // The busy tenant's page lists its latest jobs, newest first; the others' the latest too.
    const busy = await readRecentJobs(redis, names, 'busy');
    expect(busy.map((j) => j.id)).toEqual(
      Array.from({ length: HISTORY_JOBS_PER_TENANT }, (_, i) => `b${29 - i}`),
    );
    const other = await readRecentJobs(redis, names, '(other)');
    expect(other).toHaveLength(HISTORY_JOBS_PER_TENANT);
    expect(other[0]!.id).toBe('s1999');
  });

  it('stays within its stated size when every series fills every bucket', async () => {
    // The worst case: every tenant and model kept, every bucket of every range written, each
    // with every field and distributions as wide as they go.
    const wide = (k: number) => 2 ** (k / 2) - 0.5;
    const fill = async (from: number, step: number, n: number) => {
      for (let b = 0; b < n; b++) {
        const batch = newBatch();
        for (let t = 0; t <= HISTORY_MAX_TENANTS; t++) {
          for (let k = 1; k < 46; k++) {
            const c = call({
              tenant: `tenant-${t}`,
              model: `model-${t % (HISTORY_MAX_MODELS + 1)}`,
              waitMs: wide(k),
              callMs: wide(k),
              inputTokens: 1e9,
              outputTokens: 1e9,
              costMicros: 1e9,
              reservedInputTokens: 1e9,
              reservedOutputTokens: 1e9,
              gate: { budget: 1e9, paused: 1e9, concurrency: 1e9, queued: 1e9 },
            });
            addCall(batch, c, from);
            addCall(batch, { ...c, ok: false }, from);
          }
        }
        Object.assign(batch.series['*']!, { r: 1e6, e: 1e6, k: 1e6, y: 1e6, x: 1e6, z: 1e6 });
        await writeHistory(redis, names, batch, from + b * step);
      }
    };
    await fill(T0 - 86_400_000, 600_000, 144);
    await fill(T0 - 3_600_000, 60_000, 60);
    await fill(T0 - 900_000, 10_000, 90);
    const k = historyKeys(names);
    const series = 1 + HISTORY_MAX_TENANTS + 1 + HISTORY_MAX_MODELS + 1;
    expect(await redis.hlen(k.tiers[2]!)).toBe(series * 144);
    expect(await redis.hlen(k.tiers[0]!)).toBe(series * 90);
    const bytes = await historyMemoryBytes(redis, names);
    expect(bytes).toBeGreaterThan(STATED_MAX_BYTES / 2);
    expect(bytes).toBeLessThanOrEqual(STATED_MAX_BYTES);
  });
});
