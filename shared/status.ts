import type { Redis } from 'ioredis';
import { type Forecast, forecastDrain, readBacklog } from './forecast.ts';
import { breakerKey, type QueueNames } from './keys.ts';
import { Limiter } from './limiter/limiter.ts';
import type { LimiterSnapshot } from './limiter/types.ts';
import { medianLatencyMs, readMetrics } from './metrics.ts';
import { openDeadLetterQueue, openQueue } from './queues.ts';

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
  /** When the waiting jobs will have started at the current limits, per priority class. */
  readonly forecast: Forecast;
  readonly breaker: {
    readonly state: string;
    readonly failures: number;
    readonly openUntil: number | null;
  };
}

/** Counts per state, the limiter's use per scope and dimension, the pause, slots and breaker. */
export async function getQueueStatus(
  redis: Redis,
  names: QueueNames,
  limiter?: Limiter,
): Promise<QueueStatus> {
  const queue = openQueue(redis, names);
  const dlq = openDeadLetterQueue(redis, names);
  try {
    const lim = limiter ?? new Limiter({ redis, names });
    const [c, d, snapshot, b, backlog, metrics] = await Promise.all([
      queue.getJobCounts('wait', 'prioritized', 'active', 'delayed', 'completed', 'failed'),
      dlq.getJobCounts('wait', 'prioritized', 'delayed'),
      lim.snapshot(),
      redis.hgetall(breakerKey(names)),
      readBacklog(redis, names),
      readMetrics(redis, names),
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
      forecast: forecastDrain(backlog.classes, snapshot, {
        headroom: lim.headroom,
        callMs: medianLatencyMs(metrics),
        sampled: backlog.sampled,
      }),
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
