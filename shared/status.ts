import { breakerKey, type QueueNames } from './keys.ts';
import { Limiter } from './limiter/limiter.ts';
import type { LimiterSnapshot } from './limiter/types.ts';
import { openDeadLetterQueue, openQueue } from './queues.ts';
import type { RedisClient } from './redis.ts';

export interface QueueStatus {
  readonly queue: string;
  readonly prefix: string;
  /** `waiting` counts every job not yet started and not delayed (BullMQ's wait + prioritized). */
  readonly counts: {
    readonly waiting: number;
    readonly active: number;
    readonly delayed: number;
    readonly completed: number;
    readonly failed: number;
    readonly dead: number;
  };
  readonly limiter: LimiterSnapshot;
  readonly breaker: {
    readonly state: string;
    readonly failures: number;
    readonly openUntil: number | null;
  };
}

/** Counts per state, the limiter's use per scope and dimension, the pause, slots and breaker. */
export async function getQueueStatus(
  redis: RedisClient,
  names: QueueNames,
  limiter?: Limiter,
): Promise<QueueStatus> {
  const queue = openQueue(redis, names);
  const dlq = openDeadLetterQueue(redis, names);
  try {
    const [c, d, snapshot, b] = await Promise.all([
      queue.getJobCounts('wait', 'prioritized', 'active', 'delayed', 'completed', 'failed'),
      dlq.getJobCounts('wait', 'prioritized', 'delayed'),
      (limiter ?? new Limiter({ redis, names })).snapshot(),
      redis.hgetall(breakerKey(names)),
    ]);
    const n = (v: number | undefined) => v ?? 0;
    return {
      queue: names.queue,
      prefix: names.prefix,
      counts: {
        waiting: n(c['wait']) + n(c['prioritized']),
        active: n(c['active']),
        delayed: n(c['delayed']),
        completed: n(c['completed']),
        failed: n(c['failed']),
        dead: n(d['wait']) + n(d['prioritized']) + n(d['delayed']),
      },
      limiter: snapshot,
      breaker: {
        state: b['state'] ?? 'closed',
        failures: Number(b['failures'] ?? 0),
        openUntil: b['open_until'] ? Number(b['open_until']) : null,
      },
    };
  } finally {
    await Promise.all([queue.close(), dlq.close()]);
  }
}
