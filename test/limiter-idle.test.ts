import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Limiter } from '../shared/limiter/limiter.ts';
import { limiterKeys } from '../shared/limiter/limiter-keys.ts';
import type { RedisClient } from '../shared/redis.ts';
import { deleteKeys, newRedis, rateHeaders, settle, start, testNames, until } from './helpers.ts';

let redis: ReturnType<typeof newRedis>;
let names: ReturnType<typeof testNames>;
beforeEach(() => {
  redis = newRedis();
  names = testNames('limidle');
});
afterEach(async () => {
  await deleteKeys(redis, names.prefix);
  redis.disconnect();
});

const WINDOW_MS = 400;
const cost = { requests: 1, inputTokens: 10, outputTokens: 10 };

/** How many of the window's keys (the log, the reservations, the window sums, takers) exist. */
const windowKeys = (r: RedisClient) => {
  const k = limiterKeys(names);
  return r.exists(k.log, k.res, k.tot, k.takers);
};
const redisNow = async () => {
  const [s, us] = await redis.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
};

describe("the limiter's window when the fleet is idle", () => {
  it('keeps no log, reservations or window sums once the last call has left the window', async () => {
    const lim = new Limiter({
      redis,
      names,
      windowMs: WINDOW_MS,
      limits: { requests: 100, tokens: 100_000 },
    });
    const admitted = [];
    for (let i = 0; i < 20; i++) {
      const d = await lim.tryAcquire({ ...cost, take: `job-${i}` }, { scopes: [`tenant:t${i}`] });
      if (!d.ok) throw new Error(`refused: ${JSON.stringify(d)}`);
      admitted.push(d.reservation);
    }
    for (const [i, r] of admitted.entries()) {
      if (i % 4 === 0) await lim.release(r);
      else {
        await start(lim, r, rateHeaders('requests', 100, 90, 1_000));
        await settle(lim, r, { inputTokens: 8, outputTokens: 5 });
      }
    }
    expect(await windowKeys(redis)).toBe(3); // each hold ended with its call
    // An idle worker prunes every second or so: that alone does not keep the keys.
    const pruning = setInterval(() => void lim.prune().catch(() => {}), 50);
    try {
      await until(async () => (await windowKeys(redis)) === 0, 5_000);
    } finally {
      clearInterval(pruning);
    }
    // Nothing of the window is left to count, and the next call is admitted as on a new queue.
    const snap = await lim.snapshot();
    expect(snap.scopes.map((s) => s.scope)).toEqual(['global']);
    expect(snap.counters.admitted).toBe(20);
    expect(await lim.tryAcquire(cost)).toMatchObject({ ok: true });
  });

  it('an open call keeps its window while its lease runs, and counts until it leaves', async () => {
    const lim = new Limiter({
      redis,
      names,
      windowMs: WINDOW_MS,
      leaseMs: 3_000,
      limits: { requests: 1 },
    });
    const d = await lim.tryAcquire(cost);
    if (!d.ok) throw new Error('refused');
    const at = await redisNow();
    // Two windows later the open call still holds the only request of the window.
    await until(async () => (await redisNow()) > at + 2 * WINDOW_MS, 5_000);
    expect(await windowKeys(redis)).toBe(3);
    expect(await lim.tryAcquire(cost)).toMatchObject({ ok: false, reason: 'budget' });
    expect(await lim.renew(d.reservation)).toBe(true);
    await start(lim, d.reservation);
    await settle(lim, d.reservation, { inputTokens: 10, outputTokens: 10 });
    await until(async () => (await windowKeys(redis)) === 0, 5_000);
  });
});
