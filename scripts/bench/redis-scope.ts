import { randomBytes } from 'node:crypto';
import type { QueueNames } from '../../shared/keys.ts';
import type { RedisClient } from '../../shared/redis.ts';
import { connectRedis, deleteKeysMatching } from '../../shared/redis.ts';

/**
 * Every bench run writes under a prefix of its own on the shared Redis and deletes exactly those
 * keys afterwards (SCAN + DEL): never FLUSHDB, other people's keys live there too.
 */
export function benchNames(label: string): QueueNames {
  const id = randomBytes(4).toString('hex');
  return { prefix: `llmqbench-${label}-${id}`, queue: `b${id}` };
}

/** Deletes every key under `prefix:` and the prefix's queue registry; resolves with the count. */
export function deleteKeys(redis: RedisClient, prefix: string): Promise<number> {
  return deleteKeysMatching(redis, `${prefix}:*`);
}

/** A connection for the bench (BullMQ needs `maxRetriesPerRequest: null`); errors are logged once. */
export function benchRedis(url: string): RedisClient {
  const redis = connectRedis(url);
  let warned = false;
  redis.on('error', (err) => {
    if (!warned) process.stderr.write(`bench: redis error: ${err.message}\n`);
    warned = true;
  });
  return redis;
}

/** Prefixes of the scopes still open: what an interrupted run must still clean up. */
const active = new Set<string>();

/**
 * Runs `fn` with fresh names and a connection, then deletes every key under the names' prefix
 * and closes the connection, whatever happened.
 */
export async function withBenchScope<T>(
  url: string,
  label: string,
  fn: (redis: RedisClient, names: QueueNames) => Promise<T>,
): Promise<T> {
  const names = benchNames(label);
  const redis = benchRedis(url);
  active.add(names.prefix);
  try {
    return await fn(redis, names);
  } finally {
    await deleteKeys(redis, names.prefix).catch(() => {});
    active.delete(names.prefix);
    await redis.quit().catch(() => redis.disconnect());
  }
}

/** Deletes the keys of every scope still open (after an interrupt), within `timeoutMs`. */
export async function cleanupOpenScopes(url: string, timeoutMs = 5_000): Promise<void> {
  if (active.size === 0) return;
  const redis = benchRedis(url);
  const work = Promise.all([...active].map((p) => deleteKeys(redis, p).catch(() => 0)));
  await Promise.race([work, new Promise((r) => setTimeout(r, timeoutMs).unref())]);
  redis.disconnect();
}
