import { Redis, type RedisOptions } from 'ioredis';
import { RedisUnavailableError } from './errors.ts';

/**
 * Opens a connection for llmq. `maxRetriesPerRequest: null` is what BullMQ needs for workers;
 * callers that must fail fast (the limiter, the CLI's first ping) use {@link assertRedis}.
 */
export function connectRedis(url: string, options: RedisOptions = {}): Redis {
  return new Redis(url, { maxRetriesPerRequest: null, enableReadyCheck: true, ...options });
}

/**
 * Pings Redis once with a deadline. Throws {@link RedisUnavailableError} with the URL and
 * what to do when nothing answers, so a CLI prints one clear line instead of retrying forever.
 */
export async function assertRedis(url: string, timeoutMs = 2_000): Promise<void> {
  const probe = new Redis(url, {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    connectTimeout: timeoutMs,
    retryStrategy: () => null,
    enableOfflineQueue: false,
  });
  let cause: unknown;
  probe.on('error', (err) => {
    cause ??= err;
  });
  try {
    await probe.connect();
    await probe.ping();
  } catch (err) {
    const first = (cause ?? err) as NodeJS.ErrnoException;
    const detail = first.code ?? first.message;
    throw new RedisUnavailableError(
      url,
      detail === 'ECONNREFUSED' ? 'connection refused' : detail,
      { cause: err },
    );
  } finally {
    probe.disconnect();
  }
}

/**
 * Deletes every key matching a pattern with SCAN + UNLINK (never FLUSHDB: a shared Redis holds
 * other people's keys); resolves with how many were deleted.
 */
export async function deleteKeysMatching(redis: Redis, pattern: string): Promise<number> {
  let cursor = '0';
  let deleted = 0;
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) deleted += await redis.unlink(...keys);
  } while (cursor !== '0');
  return deleted;
}
