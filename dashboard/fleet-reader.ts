import {
  BudgetLedger,
  type BudgetLimits,
  type BudgetSettings,
  type SpendLine,
  spendReport,
} from '../shared/budgets.ts';
import { type HeldBounds, type HeldBytes, readHeldBytes } from '../shared/held.ts';
/**
 * Reads what the fleet wrote to Redis about each queue (BullMQ's job counts, the limiter's
 * window, the shared pause, the breaker, the workers' counters) into one plain view. The
 * limiter page's JSON and `/metrics` are both made from it, so they never disagree.
 */

import { type BreakerReading, type BreakerState, readBreaker } from '../shared/breaker-state.ts';
import {
  type DeploymentCalls,
  type DeploymentStatus,
  deploymentScopesOf,
  readDeployments,
} from '../shared/deployment-status.ts';
import { type Forecast, forecastDrain, readBacklog } from '../shared/forecast.ts';
import { llmqKey, type QueueNames } from '../shared/keys.ts';
import { Limiter } from '../shared/limiter/limiter.ts';
import type { DimensionLimits, LimiterSnapshot, ScopeSnapshot } from '../shared/limiter/types.ts';
import { LATENCY_BUCKETS_MS, medianLatencyMs, readMetrics } from '../shared/metrics.ts';
import {
  type DeadLetterQueue,
  type LlmqQueue,
  listQueues,
  openDeadLetterQueue,
  openQueue,
} from '../shared/queues.ts';
import type { RedisClient } from '../shared/redis.ts';
import { type HistogramSeries, readHistograms } from '../shared/telemetry/histograms.ts';

export type { BreakerState } from '../shared/breaker-state.ts';

/** Everything the dashboard shows about one queue, at one instant (Redis time). */
export interface QueueView {
  readonly queue: string;
  /** Redis time of the reading, ms. */
  readonly now: number;
  /** The limiter's window, ms. */
  readonly windowMs: number;
  /** Use against limit of every scope and dimension in the current window. */
  readonly scopes: readonly ScopeSnapshot[];
  readonly pause: { readonly until: number | null; readonly remainingMs: number };
  readonly breaker: {
    readonly state: BreakerState;
    readonly failures: number;
    readonly openUntil: number | null;
    readonly remainingMs: number;
  };
  readonly slots: { readonly inFlight: number; readonly cap: number | null };
  readonly waiters: number;
  /** The pool's deployments (scopes `deployment:<name>`), each with its pause and breaker. */
  readonly deployments: readonly DeploymentView[];
  /** 429s by source: refused by llmq's own limits vs returned by the provider. */
  readonly rateLimited: {
    readonly llmq: number;
    readonly provider: number;
    readonly providerRetryAfter: number;
    readonly providerFinal: number;
  };
  /** Waiting jobs (prioritized + wait + delayed) against the queue's bound (null: unbounded). */
  readonly depth: { readonly waiting: number; readonly bound: number | null };
  /** BullMQ's job counts by state. */
  readonly jobs: Readonly<Record<string, number>>;
  /** Redis bytes the queue's jobs hold, by what they keep, and the bounds on them. */
  readonly held: HeldBytes & { readonly bounds: HeldBounds };
  readonly deadLetters: number;
  /** Money spent this day and month, by budget (against it) and by model. */
  readonly spend: readonly SpendLine[];
  /** Whether any money budget is configured (without, spend is counted by the history only). */
  readonly budgetsConfigured: boolean;
  /** Actual over reserved tokens of settled calls; null before the first settle. */
  readonly accuracy: { readonly input: number | null; readonly output: number | null };
  readonly counters: LimiterSnapshot['counters'];
  /** The workers' fleet-wide counters (`shared/metrics.ts`), 0 when absent. */
  readonly provider: {
    readonly calls: number;
    readonly ok: number;
    readonly serverErrors: number;
    readonly clientErrors: number;
    readonly connectionErrors: number;
    readonly retries: number;
    readonly deadLettered: number;
    /** Dead letters the dead-letter bounds dropped, and their bytes. */
    readonly deadLettersDropped: number;
    readonly deadLetterBytesDropped: number;
    /** Finished jobs the results' bytes bound dropped. */
    readonly resultsDropped: number;
    readonly completed: number;
    /** Calls whose job another worker had taken meanwhile (a worker stalled past its lock). */
    readonly duplicateCalls: number;
    readonly tokensIn: number;
    readonly tokensOut: number;
    readonly latency: {
      /** Cumulative counts per upper bound in ms. */
      readonly buckets: readonly { readonly le: number; readonly count: number }[];
      readonly sumMs: number;
      readonly count: number;
    };
  };
  /** When the waiting jobs will have started at the current limits, per priority class. */
  readonly forecast: Forecast;
  /** Wait, call and token histograms by model and tenant (`telemetry/histograms.ts`). */
  readonly histograms: readonly HistogramSeries[];
}

/** One deployment of the pool as the dashboard shows it. */
export interface DeploymentView {
  readonly name: string;
  /** Its scope's use against its limits, and the provider's readings. */
  readonly scope: ScopeSnapshot;
  readonly pause: QueueView['pause'];
  readonly breaker: QueueView['breaker'];
  /** The calls the workers made on it: all, and by outcome. */
  readonly calls: DeploymentCalls;
}

export interface FleetReaderOptions {
  /** Used, not owned. */
  readonly redis: RedisClient;
  readonly prefix: string;
  /** The queues' depth bound; 0 is unbounded. @default 10_000 */
  readonly maxDepth?: number;
  /** Money budgets (Config.budgets), to show spend against them; spend alone without. */
  readonly budgets?: Readonly<Record<string, BudgetLimits>> | undefined;
  readonly headroom?: number;
  /** The bounds on what a queue holds in Redis (Config: maxDepthBytes, resultsMaxBytes, …). */
  readonly heldBounds?: HeldBounds | undefined;
}

const DEPTH_STATES = ['prioritized', 'waiting', 'delayed'] as const;

interface QueueHandles {
  readonly queue: LlmqQueue;
  readonly dead: DeadLetterQueue;
  /** The limiter reading this queue's window, and the `window|margin|scopes` it was made for. */
  limiter?: { readonly reader: Limiter; readonly shape: string };
}

/** Published limiter settings (see `Limiter.publishConfig`). */
interface PublishedConfig {
  readonly windowMs?: number;
  readonly headroom?: number;
  readonly scopes?: Record<string, DimensionLimits>;
}

/** The breaker as the view shows it. */
function breakerOf(
  b: Pick<BreakerReading, 'state' | 'failures' | 'openUntil'>,
  now: number,
): QueueView['breaker'] {
  const { state, openUntil } = b;
  return {
    state,
    failures: b.failures,
    openUntil,
    remainingMs: openUntil && state !== 'closed' ? Math.max(0, openUntil - now) : 0,
  };
}

/** A deployment's status as the view shows it: pause and breaker with the time they have left. */
function deploymentOf(d: DeploymentStatus, now: number): DeploymentView {
  const until = d.pausedUntil;
  return {
    name: d.name,
    scope: d.scope,
    pause: { until, remainingMs: until ? Math.max(0, until - now) : 0 },
    breaker: breakerOf(d.breaker, now),
    calls: d.calls,
  };
}

/** The workers' counters of provider calls (`m` reads a field, 0 when absent). */
function providerOf(m: (field: string) => number): QueueView['provider'] {
  let running = 0;
  const buckets = LATENCY_BUCKETS_MS.map((le) => {
    // Cumulative by construction; the max keeps it so even if a field is missing.
    running = Math.max(running, m(`le_${le}`));
    return { le, count: running };
  });
  return {
    calls: m('provider_calls'),
    ok: m('provider_ok'),
    serverErrors: m('provider_5xx'),
    clientErrors: m('provider_4xx'),
    connectionErrors: m('provider_connection_errors'),
    retries: m('retries'),
    deadLettered: m('dead_lettered'),
    deadLettersDropped: m('dead_letters_dropped'),
    deadLetterBytesDropped: m('dead_letter_bytes_dropped'),
    resultsDropped: m('results_dropped'),
    completed: m('completed'),
    duplicateCalls: m('duplicate_calls'),
    tokensIn: m('tokens_in'),
    tokensOut: m('tokens_out'),
    latency: {
      buckets,
      sumMs: m('latency_sum_ms'),
      count: Math.max(m('latency_count'), running),
    },
  };
}

/** Opens (and caches) the BullMQ queues and limiters of every queue under a prefix. */
export class FleetReader {
  readonly prefix: string;
  readonly maxDepth: number;
  private readonly heldBounds: HeldBounds;
  /** Used, not owned. */
  readonly redis: RedisClient;
  private readonly budgets: BudgetSettings;
  private readonly handles = new Map<string, QueueHandles>();

  constructor(options: FleetReaderOptions) {
    this.redis = options.redis;
    this.prefix = options.prefix;
    this.maxDepth = options.maxDepth ?? 10_000;
    this.heldBounds = options.heldBounds ?? {};
    this.budgets = { budgets: options.budgets ?? {}, policy: 'wait', prices: {} };
    if (!Number.isInteger(this.maxDepth) || this.maxDepth < 0) {
      throw new TypeError(
        `maxDepth must be a whole number from 0 (unbounded) up, got ${this.maxDepth}`,
      );
    }
  }

  /** Every queue registered under the prefix whose keys are still there, sorted. */
  listQueues(): Promise<string[]> {
    return listQueues(this.redis, this.prefix);
  }

  /** The queue with the most jobs waiting, delayed or active (the first by name on a tie). */
  async busiest(queues: readonly string[]): Promise<string | undefined> {
    const loads = await Promise.all(
      queues.map(async (q) => {
        const c = await this.handle(q).queue.getJobCounts(
          'wait',
          'prioritized',
          'delayed',
          'active',
        );
        return Object.values(c).reduce((a, b) => a + b, 0);
      }),
    );
    let best: number | undefined;
    loads.forEach((load, i) => {
      if (best === undefined || load > loads[best]!) best = i;
    });
    return best === undefined ? undefined : queues[best];
  }

  private names(queue: string): QueueNames {
    return { prefix: this.prefix, queue };
  }

  /** The BullMQ queue and dead-letter queue of a queue, opened once. */
  queues(queue: string): { readonly queue: LlmqQueue; readonly dead: DeadLetterQueue } {
    return this.handle(queue);
  }

  private handle(queue: string): QueueHandles {
    let h = this.handles.get(queue);
    if (!h) {
      const names = this.names(queue);
      h = { queue: openQueue(this.redis, names), dead: openDeadLetterQueue(this.redis, names) };
      this.handles.set(queue, h);
    }
    return h;
  }

  /** Closes the queues of names no longer registered. */
  async forget(keep: readonly string[]): Promise<void> {
    const gone = [...this.handles.keys()].filter((q) => !keep.includes(q));
    await Promise.all(
      gone.map(async (q) => {
        const h = this.handles.get(q)!;
        this.handles.delete(q);
        await Promise.all([h.queue.close(), h.dead.close()]);
      }),
    );
  }

  /**
   * A limiter that reads the window with the workers' length (published in Redis), so its
   * pruning never drops a reservation the workers still count.
   */
  private async limiter(queue: string): Promise<Limiter> {
    const h = this.handle(queue);
    const raw = await this.redis.get(llmqKey(this.names(queue), 'limiter', 'config'));
    let published: PublishedConfig = {};
    try {
      published = raw ? (JSON.parse(raw) as PublishedConfig) : {};
    } catch {
      // A config written by another version: read the window with the defaults.
    }
    const windowMs =
      typeof published.windowMs === 'number' && published.windowMs >= 1
        ? published.windowMs
        : 60_000;
    const headroom =
      typeof published.headroom === 'number' && published.headroom >= 0 && published.headroom < 1
        ? published.headroom
        : undefined;
    // The pool's deployments show with their limits while they have no use (paused, breaker open).
    const scopes = deploymentScopesOf(published.scopes);
    const shape = `${windowMs}|${headroom}|${JSON.stringify(scopes)}`;
    if (h.limiter?.shape !== shape) {
      const reader = new Limiter({
        redis: this.redis,
        names: this.names(queue),
        windowMs,
        scopes,
        ...(headroom === undefined ? {} : { headroom }),
      });
      h.limiter = { reader, shape };
    }
    return h.limiter.reader;
  }

  /** Reads one queue's view. */
  async read(queue: string): Promise<QueueView> {
    const names = this.names(queue);
    const { queue: q, dead } = this.queues(queue);
    const limiter = await this.limiter(queue);
    const [snap, metrics, breaker, jobs, deadCounts, backlog, spend, held] = await Promise.all([
      limiter.snapshot(),
      readMetrics(this.redis, names),
      readBreaker(this.redis, names),
      q.getJobCounts(),
      dead.getJobCounts(),
      readBacklog(this.redis, names),
      spendReport(new BudgetLedger(this.redis, names, this.budgets)),
      readHeldBytes(this.redis, names),
    ]);
    const deployments = await readDeployments(this.redis, names, snap, metrics);
    const m = (f: string) => (Number.isFinite(metrics[f]) ? metrics[f]! : 0);
    const c = snap.counters;
    const ratio = (actual: number, reserved: number) => (reserved > 0 ? actual / reserved : null);
    return {
      queue,
      now: snap.now,
      windowMs: snap.windowMs,
      scopes: snap.scopes,
      pause: {
        until: snap.pausedUntil,
        remainingMs: snap.pausedUntil ? Math.max(0, snap.pausedUntil - snap.now) : 0,
      },
      breaker: breakerOf(breaker, snap.now),
      slots: { inFlight: snap.inFlight, cap: snap.concurrency ?? null },
      waiters: snap.waiters,
      deployments: deployments.map((d) => deploymentOf(d, snap.now)),
      rateLimited: {
        llmq: c.deniedBudget,
        provider: m('provider_429_retry_after') + m('provider_429_final'),
        providerRetryAfter: m('provider_429_retry_after'),
        providerFinal: m('provider_429_final'),
      },
      depth: {
        waiting: DEPTH_STATES.reduce((sum, s) => sum + (jobs[s] ?? 0), 0),
        bound: this.maxDepth > 0 ? this.maxDepth : null,
      },
      jobs,
      held: { ...held, bounds: this.heldBounds },
      deadLetters: Object.values(deadCounts).reduce((a, b) => a + b, 0),
      spend,
      budgetsConfigured: Object.keys(this.budgets.budgets).length > 0,
      accuracy: {
        input: ratio(c.actualIn, c.settledReservedIn),
        output: ratio(c.actualOut, c.settledReservedOut),
      },
      counters: c,
      provider: providerOf(m),
      forecast: forecastDrain(backlog.classes, snap, {
        callMs: medianLatencyMs(metrics),
        sampled: backlog.sampled,
      }),
      histograms: readHistograms(metrics),
    };
  }

  /** Closes every queue this reader opened (not the Redis connection). */
  async close(): Promise<void> {
    await this.forget([]);
  }
}
