import type { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Limiter } from '../shared/limiter/limiter.ts';
import { limiterKeys } from '../shared/limiter/limiter-keys.ts';
import type { Reservation } from '../shared/limiter/types.ts';
import { type LimiterChild, spawnLimiterChild } from './fixtures/limiter-support.ts';
import { deleteKeys, newRedis, REDIS_URL, testNames } from './helpers.ts';

let redis: Redis;
let names: ReturnType<typeof testNames>;
let child: LimiterChild | undefined;

beforeEach(() => {
  redis = newRedis();
  names = testNames('limlease');
});
afterEach(async () => {
  await child?.kill();
  child = undefined;
  await deleteKeys(redis, names.prefix);
  redis.disconnect();
});

const cost = { requests: 1, inputTokens: 10, outputTokens: 10 };

describe('leases', () => {
  it('a worker killed with SIGKILL gives its slot back when its lease expires', async () => {
    const options = { concurrency: 1, leaseMs: 1_000 };
    child = spawnLimiterChild({ redisUrl: REDIS_URL, names, options });
    await child.next('ready');
    child.send({ op: 'acquire', cost });
    const held = (await child.next('acquired'))['reservation'] as Reservation;
    await child.kill('SIGKILL');

    const lim = new Limiter({ redis, names, ...options, maxPollMs: 50 });
    // The dead worker's slot is still taken, until its lease runs out.
    const d = await lim.tryAcquire(cost);
    expect(d).toMatchObject({ ok: false, reason: 'concurrency' });
    const r = await lim.acquire(cost);
    expect(r.admittedAt).toBeGreaterThanOrEqual(held.leaseExpiresAt);
    // Admitted promptly once it expired (polling every 50 ms), not a window or two later.
    expect(r.admittedAt).toBeLessThan(held.leaseExpiresAt + 1_000);
    await lim.release(r);
  });

  it('renew keeps a lease alive past its original expiry; without renewal it lapses', async () => {
    let t = 1_700_000_000_000;
    const lim = new Limiter({ redis, names, concurrency: 1, leaseMs: 1_000, clock: () => t });
    const d = await lim.tryAcquire(cost);
    if (!d.ok) throw new Error('expected admission');
    expect(d.reservation.leaseExpiresAt).toBe(t + 1_000);
    t += 800;
    expect(await lim.renew(d.reservation)).toBe(true);
    t += 800; // past the original expiry
    expect(await lim.tryAcquire(cost)).toMatchObject({
      ok: false,
      reason: 'concurrency',
      waitMs: 200,
    });
    t += 199;
    expect(await lim.tryAcquire(cost)).toMatchObject({
      ok: false,
      reason: 'concurrency',
      waitMs: 1,
    });
    t += 1; // the renewed lease ends: the slot is free again
    const next = await lim.tryAcquire(cost);
    expect(next).toMatchObject({ ok: true });
    // The lost lease cannot be renewed any more: its slot went to someone else.
    expect(await lim.renew(d.reservation)).toBe(false);
  });

  it('a call an older worker admitted and left unanswered leaves without taking from the open sums', async () => {
    let t = 1_700_000_000_000;
    const lim = new Limiter({ redis, names, windowMs: 1_000, leaseMs: 60_000, clock: () => t });
    // As an older build wrote it (no "o": its spend never went into the open sums), its worker
    // gone: its lease ended at once.
    const k = limiterKeys(names);
    await redis.hset(k.res, 'old', `1|100|100||global|${t}`);
    await redis.zadd(k.log, t + 10, 'old');
    await redis.hset(
      k.tot,
      'global|req',
      1,
      'global|in',
      100,
      'global|out',
      100,
      'global|tok',
      200,
    );
    const d = await lim.tryAcquire(cost);
    if (!d.ok) throw new Error('expected admission');
    t += 1_100;
    await lim.prune();
    // What is still open is the new call alone: a reading takes it as not counted.
    const open = await redis.hmget(k.tot, 'global|req|open', 'global|in|open', 'global|out|open');
    expect(open.map(Number)).toEqual([1, 10, 10]);
    expect(await redis.hexists(k.res, 'old')).toBe(0);
  });
});
