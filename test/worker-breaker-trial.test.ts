import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import type { QueueNames } from '../shared/keys.ts';
import { CircuitBreaker } from '../worker/breaker.ts';
import { eachTestRedis } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
eachTestRedis('trial', (r, n) => {
  redis = r;
  names = n;
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
