import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../shared/errors.ts';
import { EstimateLearning } from '../shared/estimate-learning.ts';
import type { QueueNames } from '../shared/keys.ts';
import { eachTestRedis } from './helpers.ts';

const MODEL = 'claude-sonnet-5-5';
let redis: Redis;
let names: QueueNames;
eachTestRedis('learn', (r, n) => {
  redis = r;
  names = n;
});

const learning = (options = {}) => new EstimateLearning({ redis, names, cacheMs: 0, ...options });

/** A deterministic spread of ratios in [lo, hi]. */
function ratios(count: number, lo: number, hi: number): number[] {
  return Array.from({ length: count }, (_, i) => lo + ((i * 37) % 101) * ((hi - lo) / 100));
}

async function feed(l: EstimateLearning, values: readonly number[], estimate = 1_000) {
  let ratio = 1;
  for (const r of values) ratio = await l.record(MODEL, estimate, Math.round(estimate * r));
  return ratio;
}

describe('estimates that learn', () => {
  it('reserves the plain estimate until something is learned, and while it is cold', async () => {
    const l = learning({ minSamples: 20 });
    expect(await l.ratio(MODEL)).toBe(1);
    expect(await l.reserveFor(MODEL, 800)).toBe(800);
    // Ten settles at half the estimate: still cold, still the estimate.
    expect(await feed(l, ratios(10, 0.45, 0.5))).toBe(1);
    expect(await l.reserveFor(MODEL, 800)).toBe(800);
  });

  it('learns that the provider counts about half the estimate and reserves a high quantile of it', async () => {
    const l = learning();
    const ratio = await feed(l, ratios(300, 0.45, 0.55));
    // Never below what the provider counted (p99 of 0.45–0.55 plus 2%), far below the estimate.
    expect(ratio).toBeGreaterThanOrEqual(0.55);
    expect(ratio).toBeLessThan(0.6);
    expect(await l.reserveFor(MODEL, 1_000)).toBe(Math.ceil(1_000 * ratio));
    const learned = await l.learned(MODEL);
    expect(learned.observations).toBe(300);
    expect(learned.quantileRatio).toBeGreaterThanOrEqual(0.55);
  });

  it('follows a provider that starts counting more at once, so no call is under-reserved', async () => {
    const l = learning();
    await feed(l, ratios(200, 0.45, 0.55));
    expect(await l.record(MODEL, 1_000, 900)).toBeGreaterThanOrEqual(0.9);
    // The quantile catches up as the new counts come in, while the recent max holds.
    const after = await feed(l, ratios(200, 0.85, 0.9));
    expect(after).toBeGreaterThanOrEqual(0.9);
    expect((await l.learned(MODEL)).quantileRatio).toBeGreaterThanOrEqual(0.9);
  });

  it('forgets a single outlier after `recent` settles, and old counts decay', async () => {
    const l = learning({ recent: 10 });
    await feed(l, ratios(200, 0.45, 0.5));
    expect(await l.record(MODEL, 1_000, 3_000)).toBe(3);
    const after = await feed(l, ratios(10, 0.45, 0.5));
    expect(after).toBeLessThan(0.6);
    // A drop in what the provider counts lowers the reservation once the old counts decay.
    const lowered = await feed(l, ratios(1_500, 0.25, 0.3));
    expect(lowered).toBeLessThan(0.35);
  });

  it('rescales its weights when they grow large and keeps the same answer', async () => {
    // A half-life of 10 settles: weights pass 1e9 after 300 and are rescaled.
    const l = learning({ halfLife: 10, recent: 1 });
    await feed(l, ratios(290, 0.25, 0.3));
    const before = await feed(l, ratios(100, 0.5, 0.55));
    expect(before).toBeGreaterThanOrEqual(0.55);
    expect(before).toBeLessThan(0.6);
    expect(Number(await redis.hget(l.keyOf(MODEL), 'base'))).toBeGreaterThan(0);
    // The buckets of the old counts were too light to keep.
    const fields = await redis.hkeys(l.keyOf(MODEL));
    expect(fields.filter((f) => /^b-?\d+$/.test(f)).length).toBeLessThan(20);
  });

  it('keeps learning per model, in a key of the queue’s hash tag', async () => {
    const l = learning();
    await feed(l, ratios(50, 0.45, 0.5));
    expect(await l.ratio('claude-other-1')).toBe(1);
    expect(l.keyOf(MODEL)).toContain(`{${names.queue}}`);
    expect(await redis.exists(l.keyOf(MODEL))).toBe(1);
    // Another worker (another instance) reads what this one learned.
    expect(await learning().ratio(MODEL)).toBe(await l.ratio(MODEL));
  });

  it('never reserves more than maxRatio times the estimate', async () => {
    const l = learning({ maxRatio: 2 });
    expect(await feed(l, [5, 5, 5])).toBe(2);
  });

  it('reads the ratio again only after cacheMs', async () => {
    let now = 0;
    const reader = learning({ cacheMs: 1_000, clock: () => now });
    expect(await reader.ratio(MODEL)).toBe(1);
    await feed(learning({ minSamples: 0 }), [2]);
    expect(await reader.ratio(MODEL)).toBe(1);
    now = 1_000;
    expect(await reader.ratio(MODEL)).toBeGreaterThanOrEqual(2);
  });

  it.each([
    [{ quantile: 0 }, 'EstimateLearning quantile must be a share in (0, 1], got 0'],
    [
      { halfLife: 0.5 },
      'EstimateLearning halfLife must be a number of observations from 1 up, got 0.5',
    ],
    [{ maxRatio: 0.5 }, 'EstimateLearning maxRatio must be a number from 1 to 64, got 0.5'],
  ])('refuses the option %o, naming it and the value', (options, message) => {
    expect(() => learning(options)).toThrow(ConfigError);
    expect(() => learning(options)).toThrow(message);
  });

  it('refuses a count that is not whole tokens, before anything is written', async () => {
    const l = learning();
    await expect(l.record(MODEL, 0, 5)).rejects.toThrow(
      'estimate must be a whole number of tokens from 1 up, got 0',
    );
    await expect(l.record(MODEL, 10, 2.5)).rejects.toThrow(
      'actual input tokens must be a whole number from 0 up, got 2.5',
    );
    await expect(l.record('a model', 10, 2)).rejects.toThrow('model must be a model name');
    expect(await redis.exists(l.keyOf(MODEL))).toBe(0);
  });
});
