/**
 * One source for room: the view (view-4.lua) reads the room a call has in a scope by the
 * admission's own rule, so that the pool's choice and the forecast say what acquire then does.
 */
import type { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { formatForecast } from '../shared/forecast-format.ts';
import type { QueueNames } from '../shared/keys.ts';
import type { Limiter, LimiterOptions } from '../shared/limiter/limiter.ts';
import { getQueueStatus } from '../shared/status.ts';
import { DeploymentPool } from '../worker/pool.ts';
import { DeploymentRooms } from '../worker/pool-room.ts';
import { openPool, type Pool, request } from './fixtures/worker-harness.ts';
import { eachTestRedis, rateHeaders, testLimiter } from './helpers.ts';

const T0 = 1_800_000_000_000;
const W = 10_000;
const A = 'deployment:a';
const tokens = (n: number) => ({ requests: 1, inputTokens: n, outputTokens: 0 });

describe("a deployment's room, as the view reads it", () => {
  let redis: Redis;
  let names: QueueNames;
  let t: number;
  eachTestRedis('room-view', (r, n) => {
    redis = r;
    names = n;
  });
  beforeEach(() => {
    t = T0;
  });

  const make = (o: Partial<LimiterOptions> = {}) =>
    testLimiter({ redis, names, clock: () => t, windowMs: W, ...o });

  /** Spends `n` tokens on a, the provider's reading of that call landing on a's scope. */
  async function spend(lim: Limiter, n: number, headers: Record<string, string>): Promise<void> {
    const d = await lim.tryAcquire(tokens(n), { scopes: [A] });
    if (!d.ok) throw new Error(`expected admission, got ${JSON.stringify(d)}`);
    await lim.call(d.reservation, A).begin(headers, 0);
  }

  /** The room the view reads for a; and that acquire admits exactly that much, not one more. */
  async function roomAdmitted(lim: Limiter): Promise<number> {
    const [a] = await lim.scopeUse([A]);
    const room = a!.dimensions.tokens.room!;
    expect((await lim.tryAcquire(tokens(room + 1), { scopes: [A] })).ok).toBe(false);
    expect((await lim.tryAcquire(tokens(room), { scopes: [A] })).ok).toBe(true);
    return room;
  }

  it("leaves the provider's share of headroom out of its room", async () => {
    const lim = make({ headroom: 0.25 });
    // We spent 1,000; the provider says 1,101 of 4,000 remain (another client spent the rest).
    await spend(lim, 1_000, rateHeaders('tokens', 4_000, 1_101, W, t));
    // 1,101 less a quarter of 4,000 (the pool's old reading said 1,101).
    expect(await roomAdmitted(lim)).toBe(101);
  });

  it('skips our own window where a fresh bucket covers the call', async () => {
    // Configured at 5,000, read as a bucket of 4,000 a window: the bucket covers the call.
    const lim = make({ scopes: { [A]: { tokens: 5_000 } } });
    const bucket = (remaining: number) =>
      rateHeaders('tokens', 4_000, remaining, ((4_000 - remaining) * W) / 4_000, t);
    // A small call first: its reset, long before a window, tells a bucket.
    await spend(lim, 100, bucket(3_901));
    t += 1_000;
    await spend(lim, 3_400, bucket(501));
    t += W / 2;
    // Half a window refilled 2,000: 2,501 free, though our window has 500 left under 4,000
    // (the pool's old reading said 1,500: the configured 5,000 less our 3,500).
    expect(await roomAdmitted(lim)).toBe(2_501);
  });

  it("orders a pool's equal deployments as acquire then admits", async () => {
    const lim = make({ headroom: 0.25, scopes: { 'deployment:b': { tokens: 4_000 } } });
    // a: the provider says 1,101 of 4,000 remain, 101 after its headroom. b: 1,000 of its cap's
    // 3,000 left. The old order, by the provider's room alone, put a first.
    await spend(lim, 1_000, rateHeaders('tokens', 4_000, 1_101, W, t));
    expect((await lim.tryAcquire(tokens(2_000), { scopes: ['deployment:b'] })).ok).toBe(true);
    const entry = (name: string) => ({
      config: { name, kind: 'anthropic' as const, preference: 1 },
      call: () => Promise.reject(new Error('not called')),
    });
    const pool = new DeploymentPool(redis, names, [entry('a'), entry('b')], undefined);
    const job = tokens(300);
    const order = await new DeploymentRooms(lim, () => 0).order(pool.list, job);
    expect(order.map((d) => d.name)).toEqual(['b', 'a']);
    expect((await lim.tryAcquire(job, { scopes: [A] })).ok).toBe(false);
    expect((await lim.tryAcquire(job, { scopes: ['deployment:b'] })).ok).toBe(true);
  });
});

describe('the forecast of a pool', () => {
  let pool: Pool | undefined;
  afterEach(async () => {
    await pool?.cleanup();
    pool = undefined;
  });

  it('says when, not "starts now", while every deployment is full', async () => {
    pool = await openPool('room-forecast');
    const scopes = { [A]: { tokens: 1_000 }, 'deployment:b': { tokens: 1_000 } };
    const lim = testLimiter({ redis: pool.redis, names: pool.names, windowMs: 60_000, scopes });
    await pool.producer.enqueue(request('Say hi.', 200));
    const forecast = async () => (await getQueueStatus(pool!.redis, pool!.names, lim)).forecast;

    // a is full; b has room for the job: it starts now.
    expect((await lim.tryAcquire(tokens(1_000), { scopes: [A] })).ok).toBe(true);
    expect((await forecast()).binding).toBeNull();

    // b full too: the job waits for the window (no global or model limit holds it back).
    expect((await lim.tryAcquire(tokens(1_000), { scopes: ['deployment:b'] })).ok).toBe(true);
    const f = await forecast();
    expect(f.binding).toBe('tokens');
    expect(f.drainMs).toBeGreaterThan(0);
    expect(formatForecast(f).join('\n')).toMatch(/started within .*, bound by tokens/);
  });
});
