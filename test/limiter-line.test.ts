import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import type { QueueNames } from '../shared/keys.ts';
import { callCost, eachTestRedis, testLimiter } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
eachTestRedis('line', (r, n) => {
  redis = r;
  names = n;
});

const cost = callCost;

describe('a place in line its caller drives', () => {
  it('a denial is a value: the caller changes what it asks for, or leaves the line', async () => {
    const t = 1_700_000_000_000;
    const lim = testLimiter({ redis, names, clock: () => t, limits: { tokens: 1_000 } });
    const first = await lim.tryAcquire(cost(400, 400));
    expect(first.ok).toBe(true);

    const line = lim.line(cost(300, 300));
    const denied = await line.attempt();
    expect(denied).toMatchObject({ ok: false, denial: { reason: 'budget', dimension: 'tokens' } });
    expect((await lim.snapshot()).waiters).toBe(1);
    // Another job came to the head: a smaller one fits now, in the same place in line.
    line.update({ cost: cost(100, 100) });
    const admitted = await line.attempt();
    expect(admitted.ok).toBe(true);
    expect((await lim.snapshot()).waiters).toBe(0);

    const other = lim.line(cost(500, 500));
    expect((await other.attempt()).ok).toBe(false);
    expect((await lim.snapshot()).waiters).toBe(1);
    await other.leave();
    expect((await lim.snapshot()).waiters).toBe(0);
  });
});
