import type { Redis } from 'ioredis';
import { beforeEach, describe, expect, it } from 'vitest';
import type { QueueNames } from '../shared/keys.ts';
import type { Limiter, LimiterOptions } from '../shared/limiter/limiter.ts';
import { eachTestRedis, testLimiter } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
let t: number;

eachTestRedis('limhead', (r, n) => {
  redis = r;
  names = n;
});
beforeEach(() => {
  t = 1_700_000_000_000;
});

const W = 10_000;
// 10% headroom on 1,010 tokens: 909 usable until the provider's readings show its count exactly.
const make = (o: Partial<LimiterOptions> = {}) =>
  testLimiter({
    redis,
    names,
    windowMs: W,
    clock: () => t,
    maxPollMs: 10,
    limits: { tokens: 1_010 },
    headroom: 0.1,
    ...o,
  });
const cost = (inputTokens: number) => ({ requests: 1, inputTokens, outputTokens: 0 });
const tokens = (limit: number, remaining: number): Record<string, string> => ({
  'anthropic-ratelimit-tokens-limit': String(limit),
  'anthropic-ratelimit-tokens-remaining': String(remaining),
});

/** Spends `n` tokens, settled at that. */
async function spend(lim: Limiter, n: number): Promise<void> {
  const d = await lim.tryAcquire(cost(n));
  if (!d.ok) throw new Error(`expected admission, got ${JSON.stringify(d)}`);
  await lim.settle(d.reservation, { inputTokens: n, outputTokens: 0 });
}

const admits = async (lim: Limiter, n: number) => (await lim.tryAcquire(cost(n))).ok;
const wholeLimit = async (lim: Limiter) =>
  (await lim.snapshot()).scopes.find((s) => s.scope === 'global')?.dimensions.tokens.wholeLimit;

describe('headroom', () => {
  it('keeps its share of the limit unused until a reading shows the provider’s count', async () => {
    const lim = make();
    await spend(lim, 900);
    expect(await admits(lim, 50)).toBe(false);
    expect(await wholeLimit(lim)).toBe(false);
    // Exact, and all of it ours: nothing for the headroom to cover.
    await lim.observe(tokens(1_010, 110));
    expect(await wholeLimit(lim)).toBe(true);
    expect(await admits(lim, 50)).toBe(true);
    // Never beyond the limit itself.
    expect(await admits(lim, 61)).toBe(false);
    expect(await admits(lim, 60)).toBe(true);
  });

  it('comes back when the exact reading is a window old', async () => {
    const lim = make();
    await spend(lim, 850);
    await lim.observe(tokens(1_010, 160));
    t += W - 1;
    // The 850 are still in the window; the reading's mark lapses with it.
    expect(await admits(lim, 100)).toBe(true);
    t += 1;
    // The 850 have left; with the 100 still open, 900 of 909 are used.
    await spend(lim, 800);
    expect(await admits(lim, 10)).toBe(false);
    expect(await admits(lim, 9)).toBe(true);
  });

  it('stays while another client’s spend is counted', async () => {
    const lim = make();
    await spend(lim, 800);
    // The provider counts 20 more than ours: someone else's.
    await lim.observe(tokens(1_010, 190));
    await lim.observe(tokens(1_010, 190));
    expect(await wholeLimit(lim)).toBe(false);
    // 800 + 20 + 89 = 909: the limit less headroom, not the limit.
    expect(await admits(lim, 90)).toBe(false);
    expect(await admits(lim, 89)).toBe(true);
  });

  it('stays when the reading may be rounded, as Anthropic rounds tokens to thousands', async () => {
    const lim = make({ limits: { tokens: 10_000 } });
    await spend(lim, 8_800);
    // 1,200 left, reported as 1,000: within the rounding, ours; not exact.
    await lim.observe(tokens(10_000, 1_000));
    expect(await admits(lim, 200)).toBe(true);
    expect(await admits(lim, 1)).toBe(false);
  });

  it('stays when the provider’s limit is below the one configured', async () => {
    const lim = make();
    await spend(lim, 900);
    await lim.observe(tokens(1_000, 100));
    expect(await admits(lim, 9)).toBe(true);
    expect(await admits(lim, 1)).toBe(false);
  });

  it('never admits a cost above the limit less headroom, even while lifted', async () => {
    const lim = make();
    await lim.observe(tokens(1_010, 1_010));
    await expect(lim.tryAcquire(cost(950))).rejects.toThrow(/950 tokens/);
    expect(await admits(lim, 909)).toBe(true);
  });
});
