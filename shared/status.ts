import { type BreakerReading, readBreaker } from './breaker-state.ts';
import { type BudgetLedger, type SpendLine, spendReport } from './budgets.ts';
import { type DeploymentStatus, readDeployments } from './deployment-status.ts';
import { readFleetLimits, type StoredFleetLimits } from './fleet-limits.ts';
import { type Forecast, forecastDrain, readBacklog } from './forecast.ts';
import { type HeldBounds, type HeldBytes, readHeldBytes } from './held.ts';
import type { QueueNames } from './keys.ts';
import { Limiter } from './limiter/limiter.ts';
import type { DimensionLimits, LimiterSnapshot } from './limiter/types.ts';
import { medianLatencyMs, readMetrics } from './metrics.ts';
import { type DeadLetterQueue, type LlmqQueue, openDeadLetterQueue, openQueue } from './queues.ts';
import type { RedisClient } from './redis.ts';

export interface QueueStatus {
  readonly queue: string;
  readonly prefix: string;
  /**
   * Each job once. `waiting` counts every job not yet started and not delayed (BullMQ's wait +
   * prioritized); `dead` the dead letters; `failed` the failed jobs without one (its letter was
   * purged or retried away), since BullMQ also keeps every dead-lettered job as failed.
   */
  readonly counts: {
    readonly waiting: number;
    readonly active: number;
    readonly delayed: number;
    readonly completed: number;
    readonly failed: number;
    readonly dead: number;
  };
  readonly limiter: LimiterSnapshot;
  /**
   * The fleet's limits: `configured` as stored (`llmq limits`, written by workers), null when
   * none are; `read` the limits the provider's headers told, by scope and dimension, null
   * before any reading.
   */
  readonly limits: {
    readonly configured: StoredFleetLimits | null;
    readonly read: Readonly<Record<string, DimensionLimits>> | null;
  };
  /** When the waiting jobs will have started at the current limits, per priority class. */
  readonly forecast: Forecast;
  /** Money spent this day and month against each budget, and per model (budgets configured). */
  readonly spend?: readonly SpendLine[];
  readonly breaker: Pick<BreakerReading, 'state' | 'failures' | 'openUntil'>;
  /** The pool's deployments (scopes `deployment:<name>`): use, pause, breaker; empty without. */
  readonly deployments: readonly DeploymentStatus[];
  /** Redis bytes the queue's jobs hold, by what they keep, and the bounds on them. */
  readonly held: HeldBytes & { readonly bounds: HeldBounds };
}

/** The limits the provider's headers told, by scope and dimension; null before any reading. */
function readLimits(s: LimiterSnapshot): Record<string, DimensionLimits> | null {
  const out: Record<string, DimensionLimits> = {};
  for (const scope of s.scopes) {
    const read = Object.entries(scope.dimensions).filter(([, u]) => u.providerLimit !== undefined);
    if (read.length > 0)
      out[scope.scope] = Object.fromEntries(read.map(([d, u]) => [d, u.providerLimit]));
  }
  return Object.keys(out).length > 0 ? out : null;
}

/** How many dead letters' jobs are also in the queue's failed set (one read, no write). */
async function deadAndFailed(
  redis: RedisClient,
  queue: LlmqQueue,
  dlq: DeadLetterQueue,
): Promise<number> {
  const ids = await dlq.getRanges(['wait', 'prioritized', 'delayed'], 0, -1);
  let both = 0;
  for (let i = 0; i < ids.length; i += 1_000) {
    const scores = await redis.zmscore(queue.keys['failed']!, ...ids.slice(i, i + 1_000));
    both += scores.filter((v) => v !== null).length;
  }
  return both;
}

export type QueueCounts = QueueStatus['counts'];

/** A queue's jobs per state, each job once (see {@link QueueStatus.counts}). */
export async function getQueueCounts(redis: RedisClient, names: QueueNames): Promise<QueueCounts> {
  const queue = openQueue(redis, names, { read: true });
  const dlq = openDeadLetterQueue(redis, names, { read: true });
  try {
    const [c, d, both] = await Promise.all([
      queue.getJobCounts('wait', 'prioritized', 'active', 'delayed', 'completed', 'failed'),
      dlq.getJobCounts('wait', 'prioritized', 'delayed'),
      deadAndFailed(redis, queue, dlq),
    ]);
    const n = (v: number | undefined) => v ?? 0;
    return {
      waiting: n(c['wait']) + n(c['prioritized']),
      active: n(c['active']),
      delayed: n(c['delayed']),
      completed: n(c['completed']),
      failed: Math.max(0, n(c['failed']) - both),
      dead: n(d['wait']) + n(d['prioritized']) + n(d['delayed']),
    };
  } finally {
    await Promise.all([queue.close(), dlq.close()]);
  }
}

/** Counts per state, the limiter's use per scope and dimension, the pause, slots and breaker. */
export async function getQueueStatus(
  redis: RedisClient,
  names: QueueNames,
  limiter?: Limiter,
  ledger?: BudgetLedger,
  bounds: HeldBounds = {},
): Promise<QueueStatus> {
  const lim = limiter ?? new Limiter({ redis, names });
  const [counts, snapshot, b, backlog, metrics, spend, configured, held] = await Promise.all([
    getQueueCounts(redis, names),
    lim.snapshot(),
    readBreaker(redis, names),
    readBacklog(redis, names),
    readMetrics(redis, names),
    ledger ? spendReport(ledger) : undefined,
    readFleetLimits(redis, names),
    readHeldBytes(redis, names),
  ]);
  const deployments = await readDeployments(redis, names, snapshot, metrics);
  return {
    queue: names.queue,
    prefix: names.prefix,
    counts,
    limiter: snapshot,
    limits: { configured: configured ?? null, read: readLimits(snapshot) },
    forecast: forecastDrain(backlog.classes, snapshot, {
      callMs: medianLatencyMs(metrics),
      sampled: backlog.sampled,
    }),
    ...(spend ? { spend } : {}),
    breaker: { state: b.state, failures: b.failures, openUntil: b.openUntil },
    deployments,
    held: { ...held, bounds },
  };
}
