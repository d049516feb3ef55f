/**
 * By preference, then by the most room: among deployments of equal preference, a job goes to the
 * one with the most room for it; a lower preference still goes first while it has room.
 */

import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import type { QueueNames } from '../shared/keys.ts';
import { Limiter } from '../shared/limiter/limiter.ts';
import { DeploymentPool } from '../worker/pool.ts';
import { DeploymentRooms } from '../worker/pool-room.ts';
import { eachTestMocks } from './fixtures/mock-servers.ts';
import { onMock } from './fixtures/pool-mocks.ts';
import { allCompleted, type Pool, poolsPerTest, request } from './fixtures/worker-harness.ts';
import { eachTestRedis, testLimiter } from './helpers.ts';

const openTestPool = poolsPerTest();
const startMock = eachTestMocks();

/** Spends most of a deployment's window (3,000 of its 4,000 tokens) as another worker would. */
async function spendMostOf(p: Pool, deployment: string): Promise<void> {
  const scope = `deployment:${deployment}`;
  const limiter = new Limiter({
    redis: p.redis,
    names: p.names,
    windowMs: 60_000,
    scopes: { [scope]: { tokens: 4_000 } },
  });
  await limiter.acquire(
    { requests: 1, inputTokens: 500, outputTokens: 2_500 },
    { scopes: [scope] },
  );
}

/** A pool of a and b, 4,000 tokens a window each, with `spent`'s window mostly spent; where one job went. */
async function oneJobAfterSpending(
  label: string,
  spent: 'a' | 'b',
  preference: { a: number; b: number },
): Promise<{ where: string | undefined; attempts: Record<'a' | 'b', number> }> {
  const [ma, mb] = await Promise.all([startMock(), startMock()]);
  const pool = await openTestPool(label);
  const a = onMock(ma, { name: 'a', limits: { tpm: 4_000 }, preference: preference.a });
  const b = onMock(mb, { name: 'b', limits: { tpm: 4_000 }, preference: preference.b });
  await spendMostOf(pool, spent);
  await pool.worker({ concurrency: 2, deployments: [a, b], limiter: { windowMs: 60_000 } });
  const id = await pool.producer.enqueue(request('Say hi.', 200));
  await allCompleted(pool, [id], 30_000);
  const where = (await pool.job(id))!.returnvalue.deployment;
  return { where, attempts: { a: ma.stats().attempts, b: mb.stats().attempts } };
}

describe('deployments of equal preference', () => {
  it('sends the next job to the one with the most room, not the first in the list', async () => {
    const r = await oneJobAfterSpending('room-a', 'a', { a: 1, b: 1 });
    // a had room for it too (1,000 tokens left), and comes first in the list.
    expect(r.where).toBe('b');
    expect(r.attempts).toEqual({ a: 0, b: 1 });
  });

  it('sends it to the first in the list when that one has the most room', async () => {
    const r = await oneJobAfterSpending('room-b', 'b', { a: 1, b: 1 });
    expect(r.where).toBe('a');
    expect(r.attempts).toEqual({ a: 1, b: 0 });
  });

  it('still sends it by preference first: a preferred deployment with room takes it', async () => {
    const r = await oneJobAfterSpending('room-pref', 'a', { a: 0, b: 1 });
    expect(r.where).toBe('a');
    expect(r.attempts).toEqual({ a: 1, b: 0 });
  });
});

describe("the deployments' room, as the gate reads it", () => {
  let redis: Redis;
  let names: QueueNames;
  eachTestRedis('room-read', (r, n) => {
    redis = r;
    names = n;
  });

  it('is read once per 100 ms, less what this process admitted since', async () => {
    const scopes = { 'deployment:a': { tokens: 1_000 }, 'deployment:b': { tokens: 1_000 } };
    const limiter = testLimiter({ redis, names, scopes });
    const entry = (name: string) => ({
      config: { name, kind: 'anthropic' as const, preference: 1 },
      call: () => Promise.reject(new Error('not called')),
    });
    const pool = new DeploymentPool(redis, names, [entry('a'), entry('b')], undefined);
    let now = 0;
    const rooms = new DeploymentRooms(limiter, () => now);
    const job = { requests: 1, inputTokens: 100, outputTokens: 200 };
    const order = async () => (await rooms.order(pool.list, job)).map((d) => d.name);
    // Equal room: the list's order.
    expect(await order()).toEqual(['a', 'b']);
    // This process admitted 300 tokens into a: b has more room now, before any new reading.
    const [a] = pool.list;
    rooms.spent(a!, [job]);
    expect(await order()).toEqual(['b', 'a']);
    // Another worker spends 600 of b's: unseen until the reading is 100 ms old.
    await limiter.acquire(
      { requests: 1, inputTokens: 100, outputTokens: 500 },
      { scopes: ['deployment:b'] },
    );
    now = 99;
    expect(await order()).toEqual(['b', 'a']);
    now = 100;
    // Read again: a's 300 were never acquired here, b's 600 were.
    expect(await order()).toEqual(['a', 'b']);
  });
});
