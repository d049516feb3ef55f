import { afterEach, describe, expect, it } from 'vitest';
import { countRedisCommands } from '../scripts/bench/command-counter.ts';
import { Limiter } from '../shared/limiter/limiter.ts';
import { limiterKeys } from '../shared/limiter/limiter-keys.ts';
import { callCost, eachTestLimiter, settle, testLimiter } from './helpers.ts';

const bed = eachTestLimiter('reader');

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

const cost = callCost;

describe('a snapshot reads and never writes', () => {
  it('leaves out what has left the window without dropping it from Redis', async () => {
    const lim = testLimiter({
      redis: bed.redis,
      names: bed.names,
      clock: () => bed.now,
      limits: { tokens: 10_000 },
    });
    for (const c of [cost(100, 200), cost(300, 400)]) {
      const d = await lim.tryAcquire(c);
      if (!d.ok) throw new Error('not admitted');
      await settle(lim, d.reservation, {
        inputTokens: c.inputTokens,
        outputTokens: c.outputTokens,
      });
    }
    bed.now += 5_000;
    const late = await lim.tryAcquire(cost(50, 60));
    if (!late.ok) throw new Error('not admitted');
    await settle(lim, late.reservation, { inputTokens: 50, outputTokens: 60 });
    // The first two calls have left the 10 s window; the third has not.
    bed.now += 6_000;
    await lim.close();
    await lim.publishConfig();

    // A dashboard's reader: no limits of its own, the window given.
    const reader = new Limiter({
      redis: bed.redis,
      names: bed.names,
      windowMs: 10_000,
      clock: () => bed.now,
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
    expect(await bed.redis.zcard(limiterKeys(bed.names).log)).toBe(3);
    // The write path drops them, and the figures stay the same.
    await lim.prune();
    expect(await bed.redis.zcard(limiterKeys(bed.names).log)).toBe(1);
    const after = (await reader.snapshot()).scopes.find((s) => s.scope === 'global')!;
    expect(after.dimensions).toEqual(global.dimensions);
  });
});
