import type { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Limiter } from '../shared/limiter/limiter.ts';
import { limiterKeys, wakeChannel } from '../shared/limiter/limiter-keys.ts';
import { connectRedis } from '../shared/redis.ts';
import { startRedisServer } from './fixtures/limiter-support.ts';
import { deleteKeys, newRedis, settle, testNames, until } from './helpers.ts';

let redis: Redis;
let other: Redis;
let subscriber: Redis;
let names: ReturnType<typeof testNames>;

beforeEach(() => {
  redis = newRedis();
  other = newRedis();
  subscriber = newRedis();
  names = testNames('wake');
});
afterEach(async () => {
  await deleteKeys(redis, names.prefix);
  for (const c of [redis, other, subscriber]) c.disconnect();
});

const cost = { requests: 1, inputTokens: 10, outputTokens: 10 };

describe('waking waiters', () => {
  it('admits a waiter as soon as another process releases its slot, not at the next poll', async () => {
    // Two limiters on two connections stand for two processes; only the waiter listens.
    const holder = new Limiter({ redis: other, names, concurrency: 1, windowMs: 10_000 });
    const waiter = new Limiter({
      redis,
      names,
      concurrency: 1,
      windowMs: 10_000,
      maxPollMs: 4_000,
      subscriber,
    });
    const held = await holder.acquire(cost);
    const admitted = waiter.acquire(cost).then(() => performance.now());
    await new Promise((r) => setTimeout(r, 300));
    const releasedAt = performance.now();
    await settle(holder, held, { inputTokens: 10, outputTokens: 10 });
    // Without the wake-up the waiter would sleep its full 4 s poll.
    expect((await admitted) - releasedAt).toBeLessThan(1_500);
    await waiter.close();
  });

  it('still waits out its poll without a subscriber (the wake-up is what makes it prompt)', async () => {
    const holder = new Limiter({ redis: other, names, concurrency: 1, windowMs: 10_000 });
    const waiter = new Limiter({
      redis,
      names,
      concurrency: 1,
      windowMs: 10_000,
      maxPollMs: 2_000,
    });
    const held = await holder.acquire(cost);
    const start = performance.now();
    const admitted = waiter.acquire(cost).then(() => performance.now());
    await new Promise((r) => setTimeout(r, 200));
    await settle(holder, held, { inputTokens: 10, outputTokens: 10 });
    expect((await admitted) - start).toBeGreaterThanOrEqual(1_900);
  });

  it('wakes a waiter of its own process at once when a call of that process ends, without the wake-up through Redis', async () => {
    // The subscriber listens on a Redis of its own: no wake-up published here reaches it.
    const elsewhere = await startRedisServer();
    const deaf = connectRedis(elsewhere.url);
    deaf.on('error', () => {});
    try {
      const lim = new Limiter({
        redis,
        names,
        concurrency: 1,
        windowMs: 10_000,
        maxPollMs: 60_000,
        subscriber: deaf,
      });
      const held = await lim.acquire(cost);
      const admitted = lim.acquire(cost).then(() => 'admitted' as const);
      await until(async () => (await lim.snapshot()).counters.deniedSlots >= 1);
      await settle(lim, held, { inputTokens: 10, outputTokens: 10 });
      // Without the wake-up here the waiter would sleep until the slot's lease (30 s) runs out.
      const late = new Promise<'late'>((r) => setTimeout(() => r('late'), 10_000).unref());
      expect(await Promise.race([admitted, late])).toBe('admitted');
      await lim.close();
    } finally {
      deaf.disconnect();
      await elsewhere.stop();
    }
  }, 30_000);

  it("wakes the next in line when the first is admitted elsewhere, not at the first one's long wait", async () => {
    // Two deployments' scopes: `a` spent for the window, `b` free. The head waits on `a`; the
    // waiter behind it asks for `b`, and is told to wait for the head (its wait: a window).
    const scopes = { 'deployment:a': { inputTokens: 100 }, 'deployment:b': { inputTokens: 100 } };
    const options = { names, scopes, headroom: 0, windowMs: 60_000, maxPollMs: 60_000 };
    const first = new Limiter({ redis: other, ...options });
    const waiter = new Limiter({ redis, ...options, subscriber });
    await first.acquire(
      { requests: 1, inputTokens: 100, outputTokens: 0 },
      { scopes: ['deployment:a'] },
    );
    const head = first.line(cost, { scopes: ['deployment:a'] });
    expect((await head.attempt()).ok).toBe(false);
    const admitted = waiter.acquire(cost, { scopes: ['deployment:b'] }).then(() => 'admitted');
    const listening = async () =>
      (await redis.call('PUBSUB', 'SHARDNUMSUB', wakeChannel(names)))?.toString() !==
      `${wakeChannel(names)},0`;
    await until(
      async () => (await redis.zcard(limiterKeys(names).waiters)) === 2 && (await listening()),
    );
    head.update({ scopes: ['deployment:b'] });
    expect((await head.attempt()).ok).toBe(true);
    const late = new Promise<'late'>((r) => setTimeout(() => r('late'), 10_000).unref());
    expect(await Promise.race([admitted, late])).toBe('admitted');
    await waiter.close();
  }, 30_000);
});
