import type { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { countRedisCommands } from '../scripts/bench/command-counter.ts';
import type { QueueNames } from '../shared/keys.ts';
import { Limiter } from '../shared/limiter/limiter.ts';
import { limiterKeys } from '../shared/limiter/limiter-keys.ts';
import { eachTestRedis, settle, testLimiter } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
let t: number;
eachTestRedis('reader', (r, n) => {
  redis = r;
  names = n;
});
beforeEach(() => {
  t = 1_700_000_000_000;
});

/** Every command a snapshot may send: none of them writes. */
const READS = new Set([
  'get',
  'time',
  'multi',
  'exec',
  'hgetall',
  'zcount',
  'zcard',
  'zrangebyscore',
  'hmget',
  'zscore',
  'hkeys',
  // The view script, which Redis runs read-only: it refuses any write.
  'evalsha_ro',
  'eval_ro',
]);

let counter: Awaited<ReturnType<typeof countRedisCommands>> | undefined;
afterEach(() => {
  counter?.restore();
  counter = undefined;
});

const cost = (inputTokens: number, outputTokens: number) => ({
  requests: 1,
  inputTokens,
  outputTokens,
});

describe('a snapshot reads and never writes', () => {
  it('leaves out what has left the window without dropping it from Redis', async () => {
    const lim = testLimiter({ redis, names, clock: () => t, limits: { tokens: 10_000 } });
    for (const c of [cost(100, 200), cost(300, 400)]) {
      const d = await lim.tryAcquire(c);
      if (!d.ok) throw new Error('not admitted');
      await settle(lim, d.reservation, {
        inputTokens: c.inputTokens,
        outputTokens: c.outputTokens,
      });
    }
    t += 5_000;
    const late = await lim.tryAcquire(cost(50, 60));
    if (!late.ok) throw new Error('not admitted');
    await settle(lim, late.reservation, { inputTokens: 50, outputTokens: 60 });
    // The first two calls have left the 10 s window; the third has not.
    t += 6_000;
    await lim.close();
    await lim.publishConfig();

    // A dashboard's reader: no limits of its own, the window given.
    const reader = new Limiter({
      redis,
      names,
      windowMs: 10_000,
      clock: () => t,
    });
    counter = await countRedisCommands();
    const snap = await reader.snapshot();
    const sent = Object.keys(counter.snapshot().commands);
    counter.restore();
    counter = undefined;

    expect(sent.filter((c) => !READS.has(c))).toEqual([]);
    const global = snap.scopes.find((s) => s.scope === 'global')!;
    expect(global.dimensions.tokens).toMatchObject({ used: 110, limit: 10_000 });
    expect(global.dimensions.inputTokens.used).toBe(50);
    expect(global.dimensions.requests.used).toBe(1);
    // Still in Redis: dropping is the write path's.
    expect(await redis.zcard(limiterKeys(names).log)).toBe(3);
    // The write path drops them, and the figures stay the same.
    await lim.prune();
    expect(await redis.zcard(limiterKeys(names).log)).toBe(1);
    const after = (await reader.snapshot()).scopes.find((s) => s.scope === 'global')!;
    expect(after.dimensions).toEqual(global.dimensions);
  });
});
