import type { Config } from './config.ts';
import { bullPrefix, depthSizesKey, llmqKey, type QueueNames } from './keys.ts';
import type { RedisClient } from './redis.ts';

/** Redis bytes a queue holds by what its jobs keep (see docs/redis-memory.md). */
export interface HeldBytes {
  /** Requests not yet started, as the depth bound counts them. */
  readonly waiting: number;
  /** Requests of the jobs running now. */
  readonly running: number;
  /** Finished jobs' results and request records. */
  readonly finished: number;
  /** Dead letters (each with its request). */
  readonly dead: number;
}

/** The bounds on what a queue holds, in bytes; 0 or absent is unbounded. */
export type HeldBounds = Partial<Record<'waiting' | 'finished' | 'dead', number>>;

/** The bounds a config sets on what a queue holds. */
export function heldBoundsOf(
  config: Pick<Config, 'maxDepthBytes' | 'resultsMaxBytes' | 'deadLetterMaxBytes'>,
): HeldBounds {
  return {
    waiting: config.maxDepthBytes,
    finished: config.resultsMaxBytes,
    dead: config.deadLetterMaxBytes,
  };
}

/** The bounds a config sets on what a worker keeps: dead letters and finished jobs. */
export function keptBoundsOf(
  config: Pick<
    Config,
    'deadLetterMaxAgeMs' | 'deadLetterMaxBytes' | 'deadLetterTenantMaxBytes' | 'resultsMaxBytes'
  >,
) {
  return {
    deadLetterBounds: {
      maxAgeMs: config.deadLetterMaxAgeMs,
      maxBytes: config.deadLetterMaxBytes,
      tenantMaxBytes: config.deadLetterTenantMaxBytes,
    },
    resultBounds: { maxBytes: config.resultsMaxBytes },
  };
}

/**
 * Reads what a queue holds: the counts the producer and the workers keep where they write
 * (waiting, finished, dead), and the running jobs' data (as many as run, bounded by the fleet's
 * concurrency). One read, no write.
 */
export async function readHeldBytes(redis: RedisClient, names: QueueNames): Promise<HeldBytes> {
  const base = `${bullPrefix(names)}:${names.queue}:`;
  const [waiting, finished, dead, active] = await Promise.all([
    redis.hget(depthSizesKey(names), ':total'),
    redis.hget(llmqKey(names, 'finished', 'bytes'), '*'),
    redis.hget(llmqKey(names, 'dead', 'bytes'), '*'),
    redis.lrange(`${base}active`, 0, -1),
  ]);
  const lengths = await Promise.all(active.map((id) => redis.hstrlen(`${base}${id}`, 'data')));
  return {
    waiting: Math.max(0, Number(waiting ?? 0)),
    running: lengths.reduce((a, b) => a + b, 0),
    finished: Math.max(0, Number(finished ?? 0)),
    dead: Math.max(0, Number(dead ?? 0)),
  };
}
