import type Anthropic from '@anthropic-ai/sdk';
import type { BudgetSettings } from '../shared/budgets.ts';
import type { EstimateLearningOptions } from '../shared/estimate-learning.ts';
import { MAX_RETRY_FOR_MS } from '../shared/job.ts';
import type { QueueNames } from '../shared/keys.ts';
import type { Limiter, LimiterOptions } from '../shared/limiter/limiter.ts';
import type { RedisClient } from '../shared/redis.ts';
import type { BackoffOptions } from './backoff.ts';
import type { BreakerOptions, CircuitBreaker } from './breaker.ts';
import type { ResultBounds } from './bullmq-internals.ts';
import type { DeadLetterBounds } from './dead-letter-bounds.ts';
import type { FairShareOptions } from './fair-share.ts';
import type { WorkerLogger } from './logger.ts';
import type { PoolEntry } from './pool.ts';
import type { ProviderCaller } from './provider.ts';

/**
 * What a worker needs: a Redis connection, the queue's names, how to call the provider, and the
 * shared budget's limits. Every other option has a default. Every worker of a queue, in any
 * process, must be given the same limits (`llmq worker` stores them and checks).
 *
 * @example
 * ```ts
 * const options: WorkerOptions = {
 *   redis: connectRedis(config.redisUrl),
 *   names: { prefix: config.prefix, queue: config.queue },
 *   client: createProviderClient({ apiKey: config.anthropicApiKey ?? '' }),
 *   limiter: {
 *     limits: { inputTokens: 400_000, outputTokens: 80_000, requests: 4_000 },
 *     windowMs: 60_000,
 *   },
 *   concurrency: 20,
 * };
 * ```
 */
export interface WorkerOptions {
  /** A connection for the limiter, the breaker and the gate (not owned). */
  readonly redis: RedisClient;
  /** The queue to work on (the producers' `prefix` and `queue`). */
  readonly names: QueueNames;
  /** The provider client, built with `createProviderClient` (SDK retries off). */
  readonly client?: Anthropic;
  /**
   * How a call is made, when not through `client` (your own gateway, a test double): it must
   * call `onStart` with the response's headers once the provider has admitted the call, and
   * throw errors with the provider's `status` and `headers`, as the SDK's do. One of `client`
   * and `provider` is required.
   */
  readonly provider?: ProviderCaller;
  /**
   * A pool of deployments (several keys, organizations, Bedrock, Vertex AI), each with its
   * config and a caller built for it (`createDeploymentCallers`): each is a limiter scope
   * `deployment:<name>` with its own limits, readings, pause and breaker, and a job goes to the
   * first that serves its model and has room (docs/deployments.md). `client` and `provider` are
   * then unused. @default undefined (one provider: `client` or `provider`)
   */
  readonly deployments?: readonly PoolEntry[] | undefined;
  /**
   * The shared budget: `limits` of the global scope per window (`requests`, `inputTokens`,
   * `outputTokens`, `tokens`: input and output together; an absent one is unlimited),
   * `windowMs` (default 60 000), `scopes` (limits of nested scopes by name, such as
   * `tenant:acme` or `model:claude-sonnet-*`), `headroom` (the share of each limit left unused)
   * and `outputAccounting` (see Config). The cap of calls in flight is `maxInFlight`.
   */
  readonly limiter: Omit<LimiterOptions, 'redis' | 'names' | 'concurrency'>;
  /**
   * Money budgets (Config.budgets, with the price table): each job's worst-case cost is held
   * with its admission (in the limiter's script) and settled to the actual with its tokens.
   */
  readonly budgets?: BudgetSettings | undefined;
  /**
   * Fair share between tenants within a priority class (weights per tenant, default 1): the
   * gate serves next the first job of the tenant furthest behind in tokens per weight, among
   * the queue's head and the tenants furthest behind (an index kept as jobs are added: never a
   * scan of the queue), and as many as fit a round in that turn order.
   * @default undefined (off)
   */
  readonly fairShare?: FairShareOptions | undefined;
  /** Calls this process runs at once, as BullMQ's `concurrency`. @default 10 */
  readonly concurrency?: number;
  /**
   * Calls in flight across every worker of the queue (the limiter's semaphore, in Redis). Four
   * workers at `concurrency: 5` with `maxInFlight: 12` run twelve calls at most, not twenty.
   * @default undefined (no fleet-wide cap)
   */
  readonly maxInFlight?: number;
  /**
   * `always`: stream every call, so the response's headers arrive the moment the provider
   * admits it and the window is stamped then; `auto`: stream when the job asks or max_tokens
   * needs it. @default 'always'
   */
  readonly stream?: 'always' | 'auto';
  /** Per-call timeout when the job sets none. @default 600_000 */
  readonly timeoutMs?: number;
  /**
   * The wait for a call's first byte (a stream's first event, a plain call's headers), for a
   * small request: a large input adds a second per 4,000 tokens, and a plain call's `max_tokens`
   * its time to be written. Past it the call is aborted, counts toward its breaker and its job is
   * retried by time (in a pool, moved at once), spending no attempt. A pool's deployment may set
   * its own (`firstByteTimeoutMs`). @default 20_000
   */
  readonly firstByteTimeoutMs?: number;
  /**
   * The longest silence between two reads of an answer that began (a stream sends `ping` events
   * while it works); past it, as past the first byte's. @default 30_000
   */
  readonly idleTimeoutMs?: number;
  /**
   * Backoff between retries: full jitter under `capMs`; a transient failure's exponent is its
   * number of transient tries. @default { baseMs: 1_000, capMs: 60_000 }
   */
  readonly backoff?: BackoffOptions;
  /**
   * How long a job's transient failures (529, 5xx, timeouts, dropped connections) are retried,
   * from its first, when the job sets no `retryForMs`; time behind an open breaker does not
   * count. `attempts` caps only the other retryable failures. 0: transient failures spend
   * attempts too. @default 600_000 (10 minutes)
   */
  readonly retryForMs?: number;
  /** What the queue's dead letters may hold. @default DEFAULT_DEAD_LETTER_BOUNDS (30 days, 256mb, 64mb a tenant) */
  readonly deadLetterBounds?: DeadLetterBounds | undefined;
  /** What the queue's finished jobs may hold. @default DEFAULT_RESULT_BOUNDS (512mb) */
  readonly resultBounds?: ResultBounds | undefined;
  /** When the shared circuit breaker opens after consecutive provider failures. */
  readonly breaker?: BreakerOptions;
  /** 429s with retry-after a job may take before it is dead-lettered. @default 20 */
  readonly maxRateLimitReturns?: number;
  /** BullMQ lock of an active job; a killed worker's job is recovered after it. @default 30_000 */
  readonly lockDurationMs?: number;
  /**
   * Times a job may be recovered from a dead worker before it is given up (and dead-lettered:
   * a job that kills its worker every time should not run forever). @default 10
   */
  readonly maxStalledCount?: number;
  /** How often this process looks for stalled jobs of dead workers. @default 15_000 */
  readonly stalledIntervalMs?: number;
  /**
   * Feed the provider's rate-limit headers to the limiter (`observe`), so spend by another
   * client of the same key counts too. @default true
   */
  readonly feedback?: boolean;
  /**
   * The longest a successful job's result waits for the gate's next reservation, so that
   * storing it also fetches the next job (one BullMQ command instead of two). It never waits
   * while the gate waits for budget, nor with fair share (its fetches go with the acquire,
   * behind the admitted jobs' move to the front). @default 25
   */
  readonly handoffWaitMs?: number;
  /**
   * An idle worker wakes the moment a job is enqueued or falls due (BullMQ's marker); it also
   * looks at the queue at least this often, in case another worker took the wake-up and left
   * the job. @default 1_000
   */
  readonly idleCheckMs?: number;
  /**
   * Learn per model and size band of the estimate how the provider counts input against llmq's
   * estimate, and reserve that (a high quantile of it) instead of the estimate; false reserves
   * the estimate as is. Shared by the fleet in Redis. @default true
   */
  readonly learnEstimates?: boolean | Omit<EstimateLearningOptions, 'redis' | 'names'>;
  /** Where the worker reports what it does. @default silent */
  readonly logger?: WorkerLogger;
  /**
   * Write each job's history (its wait, call, retries) to its BullMQ log, which Bull Board
   * shows; batched with the counters. Off saves a small list per job in Redis. @default true
   */
  readonly jobLogs?: boolean;
}

/**
 * What a probe reads of a worker: whether it is stopping, and whether its gate loop turns.
 * @inline
 */
export interface WorkerHealth {
  /** Stopping (SIGTERM, `stop()`): it takes no more jobs and lets its calls finish. */
  readonly draining: boolean;
  /**
   * How long the gate has been in its current step (looking at the queue, waiting for budget or
   * for a job, taking one), ms; 0 while every slot is busy with a call (those end by their own
   * timeout) or while draining.
   */
  readonly stepMs: number;
  /** Calls in flight in this process, and the most it runs at once. */
  readonly inFlight: number;
  readonly concurrency: number;
  /** Gate rounds and calls this process has started since the worker started. */
  readonly rounds: number;
  readonly calls: number;
}

/**
 * A running worker: what `startWorker` resolves with. Stop it before closing its Redis
 * connection.
 *
 * @example
 * ```ts
 * process.once('SIGTERM', async () => {
 *   await worker.stop(30_000); // calls in flight get 30 s; the rest go back to the queue
 *   await redis.quit();
 * });
 * ```
 */
export interface WorkerHandle {
  /** This worker's id, as the dashboard and the logs show it. */
  readonly id: string;
  /**
   * This worker's limiter (the shared budget), for tests and the bench.
   * @internal
   */
  readonly limiter: Limiter;
  /**
   * The queue's shared circuit breaker, for tests.
   * @internal
   */
  readonly breaker: CircuitBreaker;
  /** Calls in flight in this process. */
  inFlight(): number;
  /** How this worker's loop is doing, for liveness and readiness probes (`llmq worker --health-port`). */
  health(): WorkerHealth;
  /**
   * Stops pulling, lets the calls in flight finish within `graceMs`, then aborts the rest
   * (their jobs go back to wait) and closes. Safe to call twice.
   */
  stop(graceMs?: number): Promise<void>;
}

/** Throws unless `value` is a whole number from 1 up (or undefined). */
function checkCount(name: string, value: number | undefined): void {
  if (value === undefined || (Number.isInteger(value) && value >= 1)) return;
  throw new TypeError(`Expected \`${name}\` to be a whole number from 1 up, got \`${value}\``);
}

/** Throws a TypeError naming the first option that is missing or out of range, with its value. */
export function checkWorkerOptions(options: WorkerOptions): void {
  if (!options.client && !options.provider && !options.deployments?.length)
    throw new TypeError(
      'startWorker needs a provider client (`client`), a `provider` function or `deployments`',
    );
  checkCount('concurrency', options.concurrency);
  checkCount('maxInFlight', options.maxInFlight);
  checkCount('idleCheckMs', options.idleCheckMs);
  checkCount('firstByteTimeoutMs', options.firstByteTimeoutMs);
  checkCount('idleTimeoutMs', options.idleTimeoutMs);
  const r = options.retryForMs;
  if (r !== undefined && !(Number.isInteger(r) && r >= 0 && r <= MAX_RETRY_FOR_MS))
    throw new TypeError(
      `Expected \`retryForMs\` to be a whole number of ms from 0 to ${MAX_RETRY_FOR_MS} (7 days), got \`${r}\``,
    );
}
