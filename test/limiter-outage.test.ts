import { afterEach, describe, expect, it } from 'vitest';
import { LimiterUnavailableError } from '../shared/errors.ts';
import { Limiter, type LimiterOptions } from '../shared/limiter/limiter.ts';
import { connectRedis, type RedisClient } from '../shared/redis.ts';
import {
  type PrivateRedis,
  startRedisProxy,
  startRedisServer,
} from './fixtures/limiter-support.ts';
import { testNames, until } from './helpers.ts';

/*
 * Each test runs its own redis-server (never the shared one) so that it can crash, hang and
 * restart it. The limiter fails closed: an error, and nothing spent.
 */

const cost = { requests: 1, inputTokens: 100, outputTokens: 100 };

let server: PrivateRedis | undefined;
const connections: RedisClient[] = [];

afterEach(async () => {
  for (const c of connections.splice(0)) c.disconnect();
  await server?.stop();
  server = undefined;
});

function connect(url: string): RedisClient {
  // As the worker connects: retry forever, queue commands while reconnecting.
  const redis = connectRedis(url);
  redis.on('error', () => {});
  connections.push(redis);
  return redis;
}

const makeLimiter = (redis: RedisClient, o: Partial<LimiterOptions> = {}) =>
  new Limiter({
    redis,
    names: testNames('limdown'),
    limits: { tokens: 10_000 },
    concurrency: 1,
    ...o,
  });

/** Nothing admitted (or released again), nothing charged, no slot held, nobody in line. */
async function expectNothingSpent(lim: Limiter): Promise<void> {
  const snap = await lim.snapshot();
  expect(snap.counters.admitted).toBe(snap.counters.released);
  expect(snap.inFlight).toBe(0);
  expect(snap.waiters).toBe(0);
  for (const s of snap.scopes) for (const d of Object.values(s.dimensions)) expect(d.used).toBe(0);
}

describe('the limiter when Redis fails', () => {
  it('refuses at once with LIMITER_UNAVAILABLE when Redis is down, and a fresh Redis shows nothing spent', async () => {
    server = await startRedisServer();
    const redis = connect(server.url);
    const lim = makeLimiter(redis);
    const r = await lim.acquire(cost);
    await lim.release(r);

    const port = server.port;
    await server.stop();
    await until(() => redis.status !== 'ready', 5_000, 5);
    for (const attempt of [() => lim.acquire(cost), () => lim.tryAcquire(cost)]) {
      const startedAt = performance.now();
      const err = await attempt().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(LimiterUnavailableError);
      expect(err).toMatchObject({ code: 'LIMITER_UNAVAILABLE' });
      // Well under the 5 s command timeout: a closed connection is not waited on.
      expect(performance.now() - startedAt).toBeLessThan(500);
    }

    server = await startRedisServer(port);
    await until(() => redis.status === 'ready', 10_000);
    await expectNothingSpent(lim);
  });

  it('refuses at once while the client is reconnecting, not after the command timeout', async () => {
    server = await startRedisServer();
    const proxy = await startRedisProxy(server.port);
    try {
      const redis = connect(`redis://127.0.0.1:${proxy.port}`);
      const lim = makeLimiter(redis, { commandTimeoutMs: 3_000 });
      await lim.snapshot();
      // The connection drops; the next one is accepted but never answered, so ioredis stays
      // between 'connecting' and ready, where commands would wait in its queue.
      proxy.blackhole(true);
      proxy.cutAll();
      await until(() => redis.status === 'connect' || redis.status === 'connecting', 5_000, 2);
      const startedAt = performance.now();
      const err = await lim.tryAcquire(cost).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'LIMITER_UNAVAILABLE' });
      expect(performance.now() - startedAt).toBeLessThan(500);

      proxy.blackhole(false);
      proxy.cutAll();
      await until(() => redis.status === 'ready', 10_000);
      await expectNothingSpent(lim);
    } finally {
      proxy.close();
    }
  });

  it('an acquire sent as Redis dies is not admitted when Redis comes back', async () => {
    server = await startRedisServer();
    const redis = connect(server.url);
    const lim = makeLimiter(redis, { commandTimeoutMs: 300 });
    await lim.snapshot(); // scripts known, connection ready

    const port = server.port;
    server.signal('SIGKILL');
    // Sent before the client has noticed: the command is in flight, and ioredis resends it
    // after reconnecting.
    const err = await lim.tryAcquire(cost).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'LIMITER_UNAVAILABLE' });
    await server.stop();

    server = await startRedisServer(port);
    await until(() => redis.status === 'ready', 10_000);
    // Whatever the client had queued (the resent acquire) has reached the new server by then.
    await redis.ping();
    await expectNothingSpent(lim);
    // The slot is free: the next caller is admitted at once.
    expect(await lim.tryAcquire(cost)).toMatchObject({ ok: true });
  });

  it('an acquire resent after a dropped connection is admitted once and charged once', async () => {
    server = await startRedisServer();
    const proxy = await startRedisProxy(server.port);
    try {
      const redis = connect(`redis://127.0.0.1:${proxy.port}`);
      const lim = makeLimiter(redis);
      await lim.snapshot();
      // Redis runs the acquire; its answer is lost with the connection; ioredis reconnects and
      // sends the same acquire again.
      proxy.cutAtNextAnswer();
      const d = await lim.tryAcquire(cost);
      expect(d).toMatchObject({ ok: true });
      expect(proxy.cuts).toBe(1);
      const global = async () => (await lim.snapshot()).scopes.find((x) => x.scope === 'global')!;
      expect((await global()).dimensions.tokens.used).toBe(200);
      if (d.ok) await lim.release(d.reservation);
      expect((await global()).dimensions.tokens.used).toBe(0);
      expect((await lim.snapshot()).inFlight).toBe(0);
    } finally {
      proxy.close();
    }
  });

  it('a hung Redis fails the acquire after commandTimeoutMs, and nothing is admitted when it resumes', async () => {
    server = await startRedisServer();
    const redis = connect(server.url);
    const lim = makeLimiter(redis, { commandTimeoutMs: 300 });
    await lim.snapshot();

    server.signal('SIGSTOP');
    const startedAt = performance.now();
    const err = await lim.acquire(cost).catch((e: unknown) => e);
    const took = performance.now() - startedAt;
    expect(err).toMatchObject({ code: 'LIMITER_UNAVAILABLE' });
    expect(took).toBeGreaterThanOrEqual(250);
    expect(took).toBeLessThan(2_000);

    server.signal('SIGCONT');
    await redis.ping();
    await expectNothingSpent(lim);
    expect(await lim.tryAcquire(cost)).toMatchObject({ ok: true });
  });
});
