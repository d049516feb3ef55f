import type { Via } from '../shared/batch-via.ts';
import type { BudgetSettings } from '../shared/budgets.ts';
import type { RedisOutOfMemoryError } from '../shared/errors.ts';
import type { QueueNames } from '../shared/keys.ts';
import type { DimensionLimits } from '../shared/limiter/types.ts';
import type { PriorityLane } from '../shared/priority.ts';
import type { RedisClient } from '../shared/redis.ts';
import type { WaitForRoomOptions } from './depth-gate.ts';

/**
 * What `exactCount` needs: the SDK's `client.messages.countTokens` (an `Anthropic` instance fits).
 * @inline
 */
export interface TokenCounter {
  readonly messages: {
    /** The provider's count of the request's input tokens. */
    countTokens(params: never): PromiseLike<{ readonly input_tokens: number }>;
  };
}

/**
 * A producer's settings; `createProducer` fills most of them from the {@link Config}.
 * @inline
 */
export interface ProducerOptions {
  /** The connection the producer uses; it closes it only when `ownsRedis`. */
  readonly redis: RedisClient;
  /** Close `redis` with the producer. @default false */
  readonly ownsRedis?: boolean;
  readonly names: QueueNames;
  /**
   * Read the fleet's stored limits (`llmq limits`, written by workers) and refuse what could
   * never fit them too; `limits` and `scopes` given here cap them further. @default true
   */
  readonly fleetLimits?: boolean;
  /** How long the fleet's limits, once read, are used before they are read again. @default 1_000 */
  readonly fleetLimitsMaxAgeMs?: number;
  /** Limits of the global scope, to refuse a job that could never fit. */
  readonly limits?: DimensionLimits;
  /** Limits of nested scopes (`tenant:acme`, `model:claude-sonnet-*`). */
  readonly scopes?: Readonly<Record<string, DimensionLimits>>;
  /**
   * The names of the pool's deployments (Config.deployments): a job pinning another is refused.
   * @default undefined (not known here: a worker dead-letters a job pinning one it lacks)
   */
  readonly deployments?: readonly string[] | undefined;
  /**
   * Those of `deployments` that take Message Batches: a `via: 'batches'` job pinning another,
   * or any batch job when none does, is refused. @default undefined (not known here)
   */
  readonly batchDeployments?: readonly string[] | undefined;
  /** Refuse a job whose model matches no `model:` scope (Config.modelsStrict). @default false */
  readonly modelsStrict?: boolean;
  /** Money budgets (Config.budgets): a job that can never fit one is refused; so is one whose budget is spent under the `refuse` policy. */
  readonly budgets?: BudgetSettings | undefined;
  /**
   * The share of each limit the limiter keeps unused (Config.headroom): a cost above what is
   * left can never be admitted, so it is refused here already. @default 0
   */
  readonly headroom?: number;
  /** Waiting jobs allowed in the queue (Config.maxDepth); 0 for no bound. @default 0 */
  readonly maxDepth?: number;
  /** Waiting jobs allowed per tenant: one number for all, or per name (`'*'` for the rest). */
  readonly tenantMaxDepth?: number | Readonly<Record<string, number>>;
  /** Bytes of waiting jobs' data allowed in the queue (Config.maxDepthBytes); 0 for no bound. @default 0 */
  readonly maxDepthBytes?: number;
  /** Bytes of waiting jobs' data allowed per tenant: one number for all, or per name (`'*'` for the rest). */
  readonly tenantMaxBytes?: number | Readonly<Record<string, number>>;
  /** The retry hint of a {@link QueueFullError}. @default 1_000 */
  readonly retryAfterMs?: number;
  /** How long a depth reservation outlives a producer that died mid-add. @default 30_000 */
  readonly reservationTtlMs?: number;
  /**
   * Counts input tokens with the provider: when an enqueue asks for `exactCount`, and where a
   * document's guessed cost would decide how it is sent (`enqueueDocument`).
   */
  readonly tokenCounter?: TokenCounter;
  /**
   * count_tokens calls per minute the queue's producers and `llmq serve` make together (the
   * provider limits them apart from messages); a document counted past it is costed by its
   * guess. @default 100
   */
  readonly countTokensRpm?: number;
  /** Only for error messages (never logged with a password). @default taken from `redis` */
  readonly redisUrl?: string;
  /** A Redis command that takes longer fails with RedisUnavailableError. @default 10_000 */
  readonly commandTimeoutMs?: number;
  /** Seconds a completed job (its result, its idempotency key) is kept. @default 604_800 (7 days) */
  readonly keepCompletedS?: number;
  /** Completed jobs kept at most. @default 100_000 */
  readonly keepCompletedCount?: number;
  /** Seconds a failed (dead-lettered) job is kept. @default 604_800 (7 days) */
  readonly keepFailedS?: number;
  /**
   * Called each time Redis refuses a write for its maxmemory (the call then throws the same
   * error): `llmq serve` logs it, throttled. @default undefined
   */
  readonly onRedisOutOfMemory?: (err: RedisOutOfMemoryError) => void;
}

/**
 * How one job is enqueued: its priority and tenant, an idempotency key, retries, and whether to
 * wait for room under the depth bound (`wait`, `waitTimeoutMs`, `signal`).
 *
 * @example
 * ```ts
 * const options: EnqueueOptions = {
 *   priority: 'interactive', // or 'default', 'batch', or a number (1 first)
 *   tenant: 'acme',
 *   idempotencyKey: 'invoice-42',
 *   wait: true,
 *   waitTimeoutMs: 30_000,
 * };
 * ```
 */
export interface EnqueueOptions extends WaitForRoomOptions {
  /** A lane or a number, 1 the most urgent. @default 'default' */
  readonly priority?: PriorityLane | number | string;
  /** The tenant the job belongs to; its limiter scope is `tenant:<name>`. */
  readonly tenant?: string;
  /**
   * The most urgent priority the caller may ask (1 the most urgent): a more urgent `priority`
   * is refused with PriorityNotAllowedError, never lowered in silence. @default undefined (any)
   */
  readonly maxPriority?: number;
  /**
   * The same key never makes a second job (in any process) while the first exists: the first
   * job's id comes back instead, for the same request; for another request it throws (code
   * `IDEMPOTENCY_CONFLICT`). Scoped by tenant. See `idempotency.ts` for what happens after the
   * first job is removed.
   */
  readonly idempotencyKey?: string;
  /** Stream the response. */
  readonly stream?: boolean;
  /** Append the provider's stream events to the job's event stream for a reader (implies `stream`). */
  readonly relayEvents?: boolean;
  /** `anthropic-version` and `anthropic-beta` to send with the call; no other header. */
  readonly providerHeaders?: Readonly<Record<string, string>>;
  /** Per-call timeout in ms. @default 600_000 (the worker's default) */
  readonly timeoutMs?: number;
  /**
   * Tries for retryable failures that are not transient (409, an error of llmq's own…); with
   * `retryForMs: 0`, for every retryable failure. @default 5
   */
  readonly attempts?: number;
  /**
   * How long transient failures (529, 5xx, timeouts, dropped connections) are retried, in ms
   * from the job's first; they spend no attempt. 0 makes them spend attempts instead. At most
   * 7 days. @default the worker's `retryForMs` (10 minutes)
   */
  readonly retryForMs?: number;
  /** Free-form labels kept with the job. */
  readonly meta?: Readonly<Record<string, string>>;
  /** Count input tokens with the provider's count_tokens instead of estimating. @default false */
  readonly exactCount?: boolean;
  /**
   * `batches`: run it through Message Batches (half the price, outside per-minute limits, done
   * within 24 h) once a batch submitter runs; see producer/batches. @default 'messages'
   */
  readonly via?: Via;
  /**
   * The deployment of the pool the job must go to (docs/deployments.md); it waits for that one's
   * room, pause and breaker. @default undefined (the first that serves its model and has room)
   */
  readonly deployment?: string;
  /** For `via: 'batches'`: when it must be done by (ms since the epoch). */
  readonly deadlineAt?: number;
  /**
   * W3C traceparent the job's trace continues (an HTTP request's); else the active span's.
   * @default undefined
   */
  readonly traceparent?: string;
}

/**
 * {@link EnqueueOptions} for every request of an `enqueueMany`, with one idempotency key per
 * request and the chunks `addBulk` is called with.
 *
 * @example
 * ```ts
 * const options: EnqueueManyOptions = {
 *   idempotencyKeys: files.map((f) => `summary:${f}`),
 *   chunkSize: 500,
 * };
 * ```
 */
export interface EnqueueManyOptions extends Omit<EnqueueOptions, 'idempotencyKey'> {
  /** One key (or undefined) per request, in the same order; a used key with another request throws. */
  readonly idempotencyKeys?: readonly (string | undefined)[];
  /** Jobs per addBulk call and per depth reservation (capped by the bounds). @default 1_000 */
  readonly chunkSize?: number;
  /** Called after each chunk was added, with the ids of the whole chunk (existing ones too). */
  readonly onChunk?: (ids: readonly string[], firstIndex: number) => void;
}

/** What one enqueue did. */
export interface EnqueuedJob {
  readonly id: string;
  /** False when an idempotency key found the job already there. */
  readonly created: boolean;
}
