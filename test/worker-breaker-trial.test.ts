import type { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CircuitBreaker } from '../worker/breaker.ts';
import { deleteKeys, newRedis, testNames } from './helpers.ts';

let redis: Redis;
let names: ReturnType<typeof testNames>;
beforeEach(() => {
  redis = newRedis();
  names = testNames('trial');
});
afterEach(async () => {
  await deleteKeys(redis, names.prefix);
  redis.disconnect();
});

describe('the breaker’s trial call', () => {
  it('goes to one process at a time, and to another at once when its holder stops', async () => {
    const options = { threshold: 1, cooldownMs: 50, trialTtlMs: 60_000, cacheMs: 0 };
    const a = new CircuitBreaker(redis, names, options);
    const b = new CircuitBreaker(redis, names, options);
    expect(await a.failure()).toBe(true);
    await new Promise((r) => setTimeout(r, 80));
    expect(await a.check()).toEqual({ allowed: true, trial: true });
    // While a holds the trial, b may not call.
    expect(await b.check()).toMatchObject({ allowed: false });
    await a.abandonTrial();
    expect(await b.check()).toEqual({ allowed: true, trial: true });
    // A holder that is not the trial's gives nothing up.
    await a.abandonTrial();
    expect(await b.check()).toEqual({ allowed: true, trial: true });
    await b.success();
    expect((await b.state()).state).toBe('closed');
  });
});
