import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { DIFFERING_COUNTER, splitCalls } from '../scripts/bench/workload.ts';
import { ConfigError } from '../shared/errors.ts';
import { estimateInputTokens } from '../shared/estimate.ts';
import { bandEnd, bandOf, reserveRatio } from '../shared/estimate-bands.ts';
import { EstimateLearning } from '../shared/estimate-learning.ts';
import { llmqKey, type QueueNames } from '../shared/keys.ts';
import { countMockTokens, type InputCounting } from '../testing/mock-anthropic/index.ts';
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
    expect(await l.ratio(MODEL, 800)).toBe(1);
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
    expect(learned.bands).toHaveLength(1);
    expect(learned.bands[0]).toMatchObject({ from: 768, to: 1023, warm: true, ratio });
    expect(learned.bands[0]!.quantileRatio).toBeGreaterThanOrEqual(0.55);
  });

  it('follows a provider that starts counting more at once, so no call is under-reserved', async () => {
    const l = learning();
    await feed(l, ratios(200, 0.45, 0.55));
    expect(await l.record(MODEL, 1_000, 900)).toBeGreaterThanOrEqual(0.9);
    // The quantile catches up as the new counts come in, while the recent max holds.
    const after = await feed(l, ratios(200, 0.85, 0.9));
    expect(after).toBeGreaterThanOrEqual(0.9);
    expect((await l.learned(MODEL)).bands[0]!.quantileRatio).toBeGreaterThanOrEqual(0.9);
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
    const band = JSON.parse((await redis.hget(l.keyOf(MODEL), '768')) ?? '{}');
    expect(band.base).toBeGreaterThan(0);
    // The buckets of the old counts were too light to keep.
    expect(band.b.length).toBeLessThan(20);
  });

  it('keeps learning per model, in keys of the queue’s hash tag', async () => {
    const l = learning();
    await feed(l, ratios(50, 0.45, 0.5));
    expect(await l.ratio('claude-other-1', 1_000)).toBe(1);
    expect(l.keyOf(MODEL)).toContain(`{${names.queue}}`);
    expect(l.ratiosKeyOf(MODEL)).toContain(`{${names.queue}}`);
    expect(await redis.exists(l.keyOf(MODEL), l.ratiosKeyOf(MODEL))).toBe(2);
    // Another worker (another instance) reads what this one learned.
    expect(await learning().ratio(MODEL, 1_000)).toBe(await l.ratio(MODEL, 1_000));
  });

  it('never reserves more than maxRatio times the estimate', async () => {
    const l = learning({ maxRatio: 2 });
    expect(await feed(l, [5, 5, 5])).toBe(2);
  });

  it('reads the ratio again only after cacheMs', async () => {
    let now = 0;
    const reader = learning({ cacheMs: 1_000, clock: () => now });
    expect(await reader.ratio(MODEL, 1_000)).toBe(1);
    await feed(learning({ minSamples: 0 }), [2]);
    expect(await reader.ratio(MODEL, 1_000)).toBe(1);
    now = 1_000;
    expect(await reader.ratio(MODEL, 1_000)).toBeGreaterThanOrEqual(2);
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
    expect(await redis.exists(l.keyOf(MODEL), l.ratiosKeyOf(MODEL))).toBe(0);
  });

  it('learns the same from settles recorded together as one by one', async () => {
    const l = learning({ minSamples: 5, recent: 4 });
    const settles = Array.from({ length: 30 }, (_, i) => ({
      estimate: 100 + i * 7,
      actual: 40 + ((i * 37) % 60),
    }));
    for (const s of settles) await l.record('one-by-one', s.estimate, s.actual);
    await l.recordMany('together', settles.slice(0, 13));
    await l.recordMany('together', settles.slice(13));
    expect(await l.learned('together')).toEqual(await l.learned('one-by-one'));
  });

  it('learns each size band apart: short calls leave a document at its estimate', async () => {
    const l = learning();
    // Short calls: estimated 35, counted 16 (a per-message overhead llmq counts, the provider not).
    for (let i = 0; i < 30; i++) await l.record(MODEL, 35, 16);
    expect(await l.ratio(MODEL, 35)).toBeLessThan(0.5);
    // A document of 56 is another band, still cold: reserved at its estimate, not extrapolated.
    expect(await l.reserveFor(MODEL, 56)).toBe(56);
    expect(await l.reserveFor(MODEL, 1_000)).toBe(1_000);
    const learned = await l.learned(MODEL);
    expect(learned.bands.map((b) => [b.from, b.to, b.warm])).toEqual([[32, 47, true]]);
  });

  it('reserves a warm band with its own ratio, whatever the other bands learned', async () => {
    const l = learning();
    for (let i = 0; i < 20; i++) await l.record(MODEL, 35, 16);
    const doc = await feed(l, ratios(20, 0.78, 0.8));
    expect(doc).toBeGreaterThanOrEqual(0.8);
    expect(doc).toBeLessThan(0.85);
    expect(await l.ratio(MODEL, 1_000)).toBe(doc);
    expect(await l.ratio(MODEL, 35)).toBeLessThan(0.5);
  });

  it('reserves a cold band between two warm ones with the larger of theirs, never extrapolating', async () => {
    const l = learning();
    for (let i = 0; i < 20; i++) await l.record(MODEL, 35, 16);
    const doc = await feed(l, ratios(20, 0.78, 0.8));
    // 200 lies between the bands of 35 and of 1,000, and saw nothing: the larger of the two.
    expect(await l.ratio(MODEL, 200)).toBe(doc);
    // Its own latest ratios, when larger, still hold.
    await l.record(MODEL, 200, 180);
    expect(await l.ratio(MODEL, 200)).toBe(0.9);
    // Above every warm band, or below: the estimate as is.
    expect(await l.ratio(MODEL, 3_000)).toBe(1);
    expect(await l.ratio(MODEL, 20)).toBe(1);
    const learned = await l.learned(MODEL);
    expect(learned.bands.map((b) => [b.from, b.warm, b.ratio])).toEqual([
      [32, true, await l.ratio(MODEL, 35)],
      [192, false, 0.9],
      [768, true, doc],
    ]);
  });

  it.each([
    ['characters / 3.6 + 7', DIFFERING_COUNTER],
    ['the mock tokenizer (about half the estimate)', {}],
  ] as [string, InputCounting][])(
    'warms the bands of a mixed workload within its first 50 calls, counted as %s',
    async (_, counting) => {
      // The split bench's 120 requests of 15–1,500 input tokens, 20 in flight: each reserved
      // with what the calls settled before the 20 ahead of it taught.
      const l = learning();
      const calls = splitCalls(120).map((r) => ({
        estimate: estimateInputTokens({ ...r, messages: [...r.messages] }),
        actual: countMockTokens(r, counting),
      }));
      let counted = 0;
      let reserved = 0;
      for (const [i, c] of calls.entries()) {
        const back = calls[i - 20];
        if (back) await l.record(MODEL, back.estimate, back.actual);
        const r = await l.reserveFor(MODEL, c.estimate);
        expect(r).toBeGreaterThanOrEqual(c.actual);
        if (i >= 50) [counted, reserved] = [counted + c.actual, reserved + r];
      }
      expect(counted / reserved).toBeGreaterThanOrEqual(0.9);
    },
  );

  it('ignores the one ratio per model stored before bands', async () => {
    const l = learning();
    const before = llmqKey(names, 'estimate', MODEL);
    await redis.hset(before, { n: 500, ratio: '0.4', q: '0.39', recent: '0.4' });
    expect(await l.ratio(MODEL, 1_000)).toBe(1);
    await l.record(MODEL, 1_000, 500);
    expect((await l.learned(MODEL)).observations).toBe(1);
    expect(await redis.hget(before, 'ratio')).toBe('0.4');
  });
});

describe('size bands', () => {
  it.each([
    [1, 1, 1],
    [2, 2, 2],
    [3, 3, 3],
    [5, 4, 5],
    [7, 6, 7],
    [35, 32, 47],
    [48, 48, 63],
    [56, 48, 63],
    [64, 64, 95],
    [1_000, 768, 1_023],
    [1_024, 1_024, 1_535],
  ])('puts an estimate of %i in the band %i to %i', (estimate, from, to) => {
    expect(bandOf(estimate)).toBe(from);
    expect(bandEnd(from)).toBe(to);
    expect(bandOf(to + 1)).toBe(to + 1);
  });

  const warm = (ratio: number) => ({ ratio, warm: true, observations: 20 });
  const cold = (ratio: number) => ({ ratio, warm: false, observations: 3 });
  it.each([
    ['nothing learned', [], 48, 1],
    ['a warm band: its own', [[48, warm(0.6)]], 48, 0.6],
    ['a cold band alone: the estimate', [[48, cold(0.7)]], 48, 1],
    ['a cold band whose latest ratios were larger', [[48, cold(1.3)]], 48, 1.3],
    ['warm only below: no extrapolation', [[32, warm(0.46)]], 48, 1],
    ['warm only above: no extrapolation', [[64, warm(0.7)]], 48, 1],
    [
      'warm on both sides: the larger of the nearest',
      [
        [16, warm(0.9)],
        [32, warm(0.46)],
        [96, warm(0.7)],
        [128, warm(0.95)],
      ],
      48,
      0.7,
    ],
    [
      'warm on both sides, its own latest larger',
      [
        [32, warm(0.46)],
        [48, cold(0.8)],
        [96, warm(0.7)],
      ],
      48,
      0.8,
    ],
  ] as const)('reserves %s', (_, bands, band, ratio) => {
    expect(reserveRatio(new Map(bands), band)).toBe(ratio);
  });
});
