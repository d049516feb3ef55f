import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import type { QueueNames } from '../shared/keys.ts';
import type { Limiter } from '../shared/limiter/limiter.ts';
import type { Reservation } from '../shared/limiter/types.ts';
import { eachTestRedis, settle, testLimiter, until } from './helpers.ts';

/*
 * Real waiting (Redis's clock, no injected one) on a short window: the line decides who goes
 * first, not who polls at the luckiest moment.
 */

let redis: Redis;
let names: QueueNames;

eachTestRedis('limfair', (r, n) => {
  redis = r;
  names = n;
});

const WINDOW = 1_500;
const make = () =>
  testLimiter({
    redis,
    names,
    windowMs: WINDOW,
    limits: { tokens: 1_000 },
    maxPollMs: 50,
  });
const cost = (tokens: number) => ({
  requests: 1,
  inputTokens: tokens / 2,
  outputTokens: tokens / 2,
});

/** Spends `tokens` now, settled at once: the window frees them WINDOW ms after the time returned. */
async function fill(lim: Limiter, tokens: number): Promise<number> {
  const r = await lim.acquire(cost(tokens));
  await settle(lim, r, { inputTokens: tokens / 2, outputTokens: tokens / 2 });
  return r.admittedAt;
}

describe('the line of waiters', () => {
  it('admits a big request queued first before later small ones that would fit sooner', async () => {
    const lim = make();
    await fill(lim, 800);
    const order: string[] = [];
    const track = (name: string) => (r: Reservation) => {
      order.push(name);
      return r;
    };
    const big = lim.acquire(cost(600)).then(track('big'));
    await until(async () => (await lim.snapshot()).waiters === 1);
    // 800 + 100 fits now, but the big one is first in line.
    expect(await lim.tryAcquire(cost(100))).toMatchObject({ ok: false, reason: 'queued' });
    const small1 = lim.acquire(cost(100)).then(track('small1'));
    const small2 = lim.acquire(cost(100)).then(track('small2'));
    const [b, s1, s2] = await Promise.all([big, small1, small2]);
    expect(order).toEqual(['big', 'small1', 'small2']);
    expect(s1.admittedAt).toBeGreaterThanOrEqual(b.admittedAt);
    expect(s2.admittedAt).toBeGreaterThanOrEqual(s1.admittedAt);
    expect((await lim.snapshot()).waiters).toBe(0);
  });

  it('lets a more urgent waiter overtake older, less urgent ones', async () => {
    const lim = make();
    await fill(lim, 900);
    const order: string[] = [];
    const track = (name: string) => (r: Reservation) => {
      order.push(name);
      return r;
    };
    const low1 = lim.acquire(cost(300), { priority: 100 }).then(track('low1'));
    await until(async () => (await lim.snapshot()).waiters === 1);
    const low2 = lim.acquire(cost(300), { priority: 100 }).then(track('low2'));
    await until(async () => (await lim.snapshot()).waiters === 2);
    const urgent = lim.acquire(cost(300), { priority: 1 }).then(track('urgent'));
    const [l1, l2, u] = await Promise.all([low1, low2, urgent]);
    expect(order).toEqual(['urgent', 'low1', 'low2']);
    expect(u.admittedAt).toBeLessThanOrEqual(l1.admittedAt);
    expect(l1.admittedAt).toBeLessThanOrEqual(l2.admittedAt);
  });

  it('a waiter that gives up leaves the line, and the next one is served', async () => {
    const lim = make();
    const filledAt = await fill(lim, 900);
    const abort = new AbortController();
    const first = lim.acquire(cost(600), { signal: abort.signal }).catch((e: unknown) => e);
    await until(async () => (await lim.snapshot()).waiters === 1);
    const second = lim.acquire(cost(100));
    await until(async () => (await lim.snapshot()).waiters === 2);
    abort.abort(new Error('gave up'));
    expect(await first).toMatchObject({ message: 'gave up' });
    const r = await second;
    // It fits beside the 900: served at once, not when the window frees the 900.
    expect(r.admittedAt).toBeLessThan(filledAt + WINDOW);
    expect((await lim.snapshot()).waiters).toBe(0);
  });
});
