import type { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Limiter } from '../shared/limiter/limiter.ts';
import type { Reservation } from '../shared/limiter/types.ts';
import { type LimiterChild, spawnLimiterChild } from './fixtures/limiter-support.ts';
import { deleteKeys, newRedis, REDIS_URL, testNames } from './helpers.ts';

let connections: Redis[];
let names: ReturnType<typeof testNames>;
let child: LimiterChild | undefined;

beforeEach(() => {
  connections = [newRedis(), newRedis()];
  names = testNames('limpause');
});
afterEach(async () => {
  await child?.kill();
  child = undefined;
  await deleteKeys(connections[0]!, names.prefix);
  for (const c of connections) c.disconnect();
});

const cost = { requests: 1, inputTokens: 10, outputTokens: 10 };

describe('the shared pause', () => {
  it('holds every limiter, on every connection and in every process, until it ends', async () => {
    const options = { maxPollMs: 50 };
    child = spawnLimiterChild({ redisUrl: REDIS_URL, names, options });
    await child.next('ready');
    const [a, b] = connections.map((redis) => new Limiter({ redis, names, ...options })) as [
      Limiter,
      Limiter,
    ];

    const pausedUntil = await a.pauseFor(800);
    const d = await b.tryAcquire(cost);
    expect(d).toMatchObject({ ok: false, reason: 'paused' });
    if (!d.ok) {
      expect(d.waitMs).toBeGreaterThan(500);
      expect(d.waitMs).toBeLessThanOrEqual(800);
    }
    // A shorter pause asked later does not cut the longer one short.
    expect(await b.pauseFor(100)).toBe(pausedUntil);

    child.send({ op: 'acquire', cost });
    const waits: string[] = [];
    const onDenied = (w: { reason: string }) => {
      waits.push(w.reason);
    };
    const [ra, rb] = await Promise.all([
      a.acquire(cost, { onDenied }),
      b.acquire(cost, { onDenied }),
    ]);
    // Each waited: for the pause, or behind another waiter held by it.
    expect(waits.length).toBeGreaterThanOrEqual(2);
    expect((await child.next('waiting'))['reason']).toMatch(/^(paused|queued)$/);
    const rc = (await child.next('acquired'))['reservation'] as Reservation;
    // Admission times are Redis's clock, as is the pause: none may fall before its end.
    for (const r of [ra, rb, rc]) {
      expect(r.admittedAt).toBeGreaterThanOrEqual(pausedUntil);
      expect(r.admittedAt).toBeLessThan(pausedUntil + 2_000);
    }
    const snap = await a.snapshot();
    expect(snap.pausedUntil).toBeNull();
    expect(snap.counters.admitted).toBe(3);
  });
});
