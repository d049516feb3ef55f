import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { afterEach, beforeEach } from 'vitest';
import type { QueueNames } from '../shared/keys.ts';
import { Limiter, type LimiterOptions } from '../shared/limiter/limiter.ts';
import { waitInLine } from '../shared/limiter/line.ts';
import type { Charge, Reservation, Usage } from '../shared/limiter/types.ts';
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
 * A limiter for a test: no headroom, so the numbers a test writes
 * are the numbers the scripts see; a 10 s window unless told.
 */
export function testLimiter(
  options: Omit<LimiterOptions, 'windowMs'> & { windowMs?: number },
): Limiter {
  return new Limiter({ windowMs: 10_000, headroom: 0, ...options });
}

/** Where a limiter test's injected clock starts (ms). */
export const CLOCK_START = 1_700_000_000_000;

/** A limiter test's Redis, names and clock, fresh for each test (see {@link eachTestLimiter}). */
export interface LimiterBed {
  redis: Redis;
  names: QueueNames;
  /** The injected clock's time: a test moves it (`bed.now += 1_000`). */
  now: number;
  /** A testLimiter on this test's Redis, names and clock: the file's defaults, then `options`. */
  make(options?: Partial<LimiterOptions>): Limiter;
}

/**
 * Gives each test of the file a Redis connection and names of its own (as eachTestRedis) and a
 * clock at `start`, with `make` building limiters on them.
 */
export function eachTestLimiter(
  label: string,
  defaults: Partial<LimiterOptions> = {},
  start = CLOCK_START,
): LimiterBed {
  const bed = { now: start } as LimiterBed;
  eachTestRedis(label, (redis, names) => {
    bed.redis = redis;
    bed.names = names;
    bed.now = start;
  });
  bed.make = (options = {}) =>
    testLimiter({
      redis: bed.redis,
      names: bed.names,
      clock: () => bed.now,
      ...defaults,
      ...options,
    });
  return bed;
}

/** The cost of one call of `inputTokens` in and `outputTokens` out. */
export const callCost = (inputTokens: number, outputTokens = 0) => ({
  requests: 1,
  inputTokens,
  outputTokens,
});

/** Admits `cost` at once, or fails the test with the limiter's answer. */
export async function admitted(limiter: Limiter, cost: Charge): Promise<Reservation> {
  const decision = await limiter.tryAcquire(cost);
  if (!decision.ok) throw new Error(`expected admission, got ${JSON.stringify(decision)}`);
  return decision.reservation;
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

/** Settles a reservation to the provider's usage (output too under `actual` accounting). */
export function settle(limiter: Limiter, r: Reservation, usage: Usage) {
  return limiter.call(r).succeeded(usage);
}

/** Ends a call that may have reached the provider: its estimate stays charged. */
export async function keep(limiter: Limiter, r: Reservation): Promise<void> {
  await limiter.call(r).failed({ charged: true });
}

/** The provider's response began: stamps the reservation, and takes the headers' reading. */
/**
 * Waits in line for `cost` and, in the same round trip, as many of the calls queued behind it
 * (`more`) as fit at once: its reservation first, then one for each of the first k of `more`.
 */
export function acquireMany(
  limiter: Limiter,
  cost: Charge,
  o: { more?: readonly Charge[]; scopes?: string[]; priority?: number; signal?: AbortSignal } = {},
): Promise<Reservation[]> {
  const { more = [], scopes = [], priority = 100 } = o;
  const line = limiter.line(cost, { more, scopes, priority });
  return waitInLine(line, o);
}

export function start(
  limiter: Limiter,
  r: Reservation,
  headers?: Record<string, string>,
  sentAgoMs = 0,
): Promise<void> {
  return limiter.call(r).begin(headers, sentAgoMs);
}

/**
 * `anthropic-ratelimit-*` headers for one dimension (`tokens`, `input-tokens`, …), with its reset
 * `resetInMs` after `now` in whole seconds (rounded up), as the API gives it.
 */
export function rateHeaders(
  name: string,
  limit: number,
  remaining: number,
  resetInMs?: number,
  now = Date.now(),
): Record<string, string> {
  const h: Record<string, string> = {
    [`anthropic-ratelimit-${name}-limit`]: String(limit),
    [`anthropic-ratelimit-${name}-remaining`]: String(remaining),
  };
  if (resetInMs !== undefined) {
    const at = Math.ceil((now + resetInMs) / 1000) * 1000;
    h[`anthropic-ratelimit-${name}-reset`] = new Date(at).toISOString().replace('.000Z', 'Z');
  }
  return h;
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
