import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { afterEach, beforeEach } from 'vitest';
import type { QueueNames } from '../shared/keys.ts';
import { Limiter, type LimiterOptions } from '../shared/limiter/limiter.ts';
import type { Reservation } from '../shared/limiter/types.ts';
import { connectRedis, deleteKeysMatching, type RedisClient } from '../shared/redis.ts';

/** The shared Redis every test talks to; never flushed, each test owns its own prefix. */
export const REDIS_URL = process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379';

/** A fresh prefix and queue name, so tests never see each other's keys. */
export function testNames(label = 't'): QueueNames {
  const id = randomBytes(4).toString('hex');
  return { prefix: `llmqtest-${label}-${id}`, queue: `q${id}` };
}

/** A connection to the shared test Redis, a single node (the cluster tests start their own). */
export function newRedis(): Redis {
  return connectRedis(REDIS_URL) as Redis;
}

/** Deletes every key under a test's prefix (SCAN + DEL; never FLUSHDB). */
export function deleteKeys(redis: RedisClient, prefix: string): Promise<number> {
  return deleteKeysMatching(redis, `${prefix}:*`);
}

/**
 * Gives each test of the file a Redis connection and names of its own: `use` receives them
 * before the test; after it, the test's keys are deleted and the connection closed.
 */
export function eachTestRedis(label: string, use: (redis: Redis, names: QueueNames) => void): void {
  let redis: Redis | undefined;
  let names: QueueNames | undefined;
  beforeEach(() => {
    redis = newRedis();
    names = testNames(label);
    use(redis, names);
  });
  afterEach(async () => {
    if (!redis || !names) return;
    await deleteKeys(redis, names.prefix);
    redis.disconnect();
  });
}

/**
 * A limiter for a test: no headroom and no margin on the window, so the numbers a test writes
 * are the numbers the scripts see; a 10 s window unless told.
 */
export function testLimiter(
  options: Omit<LimiterOptions, 'windowMs'> & { windowMs?: number },
): Limiter {
  return new Limiter({ windowMs: 10_000, headroom: 0, windowMarginMs: 0, ...options });
}

/** Node's arguments to run `llmq …args` from source (no build needed); run them in the project's root. */
export function llmqFromSource(args: readonly string[]): string[] {
  return ['--import', 'tsx', 'scripts/cli/main.ts', ...args];
}

/**
 * Node's arguments to run TypeScript given as text (`script`, an ES module, resolved from the
 * working directory) through tsx, with `args` after it in `process.argv`.
 */
export function tsxEval(script: string, args: readonly string[] = []): string[] {
  return ['--import', 'tsx', '--input-type=module', '-e', script, ...args];
}

/**
 * Leaves a probe due on `limiter` (a global limit of `limit` tokens, no headroom): the provider
 * reports another client's quarter of the limit (and a token), a waiter is denied for budget beside it and
 * leaves, and the room comes back. The next waiter admitted goes alone while more would fit.
 */
export async function markProbeDue(limiter: Limiter, limit: number): Promise<void> {
  // Not in whole thousands: such a reading only counts beyond the provider's rounding.
  const foreign = limit / 4 + 1;
  await limiter.observe({
    'anthropic-ratelimit-tokens-limit': String(limit),
    'anthropic-ratelimit-tokens-remaining': String(limit - foreign),
  });
  const fill = limit - foreign - 500;
  const full = await limiter.tryAcquire({ requests: 1, inputTokens: 0, outputTokens: fill });
  if (!full.ok) throw new Error(`expected admission, got ${JSON.stringify(full)}`);
  const stop = new AbortController();
  await limiter
    .acquire(
      { requests: 1, inputTokens: 500, outputTokens: 500 },
      { signal: stop.signal, onDenied: () => stop.abort() },
    )
    .then(
      () => Promise.reject(new Error('expected the waiter to be denied')),
      () => undefined,
    );
  await limiter.release(full.reservation);
}

/** {@link markProbeDue} with a limit of 4,000, then the probe: resolves with its reservation. */
export async function sendProbe(limiter: Limiter): Promise<Reservation> {
  await markProbeDue(limiter, 4_000);
  return limiter.acquire({ requests: 1, inputTokens: 100, outputTokens: 100 });
}

/** Resolves in the next turn of the event loop (after what the current turn scheduled with setImmediate). */
export const nextTurn = (): Promise<void> => new Promise((r) => setImmediate(r));

/** Resolves when `check` returns true, polling every `everyMs`; rejects after `timeoutMs`. */
export { until } from '../scripts/bench/redis-servers.ts';

/** Samples `read()` every `everyMs` until `stop()`, which returns the highest value seen. */
export function watchHighest(read: () => number, everyMs = 2): { stop(): number } {
  let most = read();
  const timer = setInterval(() => {
    most = Math.max(most, read());
  }, everyMs);
  return {
    stop() {
      clearInterval(timer);
      return Math.max(most, read());
    },
  };
}
