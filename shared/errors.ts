/**
 * Typed errors of llmq. Every error carries a stable `code` (used in HTTP bodies and by the CLI
 * to choose an exit code) and a message that says what was wrong, with the bad value, and what
 * to do about it.
 */

/**
 * The stable code of every {@link LlmqError}: what HTTP bodies carry and what the CLI chooses its
 * exit code by. Match on it for the errors that have no class of their own in the public API
 * (`JOB_NOT_FOUND`, `REDIS_UNAVAILABLE`, `CONFIG_INVALID`, …).
 *
 * @example
 * ```ts
 * const retryLater: LlmqErrorCode[] = ['QUEUE_FULL', 'REDIS_UNAVAILABLE', 'LIMITER_UNAVAILABLE'];
 * ```
 */
export type LlmqErrorCode =
  | 'CONFIG_INVALID'
  | 'REQUEST_INVALID'
  | 'REDIS_UNAVAILABLE'
  | 'REDIS_OUT_OF_MEMORY'
  | 'PRIORITY_NOT_ALLOWED'
  | 'IDEMPOTENCY_CONFLICT'
  | 'LAYOUT_MISMATCH'
  | 'LIMITER_UNAVAILABLE'
  | 'COST_EXCEEDS_LIMIT'
  | 'QUEUE_FULL'
  | 'BUDGET_EXHAUSTED'
  | 'QUEUE_NOT_EMPTY'
  | 'JOB_NOT_FOUND'
  | 'JOB_FAILED'
  | 'TIMEOUT';

/**
 * Every error llmq throws on purpose: a stable `code` and a message that says what was wrong,
 * with the bad value, and what to do about it.
 *
 * @example
 * ```ts
 * try {
 *   await producer.waitForResult(id, { timeout: 10_000 });
 * } catch (err) {
 *   if (err instanceof LlmqError && err.code === 'JOB_NOT_FOUND') console.log('no such job');
 *   else throw err;
 * }
 * ```
 */
export class LlmqError extends Error {
  /** What kind of error, stable across versions. */
  readonly code: LlmqErrorCode;
  /** Made by llmq; you catch these, you rarely make one. */
  constructor(code: LlmqErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/** A setting (flag, env variable, file or option) has a bad value. */
export class ConfigError extends LlmqError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('CONFIG_INVALID', message, options);
  }
}

/**
 * One problem found in a request: the path of the field and what is wrong with it.
 * @inline
 */
export interface FieldIssue {
  /** Dotted path, such as `messages.0.content` or `max_tokens`. */
  readonly field: string;
  /** What is wrong with it, with the bad value. */
  readonly message: string;
}

/**
 * A Messages request (or another input) failed validation; nothing was written. `issues` names
 * every bad field (`messages.0.content`, `3.max_tokens` in an `enqueueMany`).
 *
 * @example
 * ```ts
 * try {
 *   await producer.enqueue({ model: 'claude-haiku-4-5', max_tokens: 0, messages: [] });
 * } catch (err) {
 *   if (!(err instanceof RequestValidationError)) throw err;
 *   for (const issue of err.issues) console.log(issue.field, issue.message);
 * }
 * ```
 */
export class RequestValidationError extends LlmqError {
  /** Every problem found, the first one in the message. */
  readonly issues: readonly FieldIssue[];
  /** @internal */
  constructor(issues: readonly FieldIssue[], prefix = 'invalid request') {
    const first = issues[0];
    const more = issues.length > 1 ? ` (and ${issues.length - 1} more)` : '';
    super(
      'REQUEST_INVALID',
      `${prefix}: ${first ? `${first.field}: ${first.message}` : 'unknown problem'}${more}`,
    );
    this.issues = issues;
  }
  /** The first offending field, for HTTP error bodies. */
  get field(): string | undefined {
    return this.issues[0]?.field;
  }
}

/** The request names a model the fleet does not serve (its models are strict, and none matches). */
export class ModelNotServedError extends RequestValidationError {
  readonly model: string;
  constructor(model: string, detail: string) {
    super([{ field: 'model', message: detail }]);
    this.model = model;
  }
}

/** The request asks a priority more urgent than its caller (its API key) may ask. */
export class PriorityNotAllowedError extends LlmqError {
  readonly priority: number;
  readonly maxPriority: number;
  constructor(priority: number, maxPriority: number) {
    super(
      'PRIORITY_NOT_ALLOWED',
      `priority ${priority} is more urgent than this API key may ask (its max-priority is ${maxPriority}; 1 is the most urgent): ask ${maxPriority} or a larger number`,
    );
    this.priority = priority;
    this.maxPriority = maxPriority;
  }
}

/**
 * An idempotency key already names a job of another request: the first job is kept, this
 * request is not queued, and the first one's answer is never given for it.
 */
export class IdempotencyConflictError extends LlmqError {
  readonly id: string;
  constructor(id: string) {
    super(
      'IDEMPOTENCY_CONFLICT',
      `this idempotency key was used for another request (job ${id}); nothing was queued: send the same request again, or use a new key for a new request`,
    );
    this.id = id;
  }
}

/**
 * Workers of another build (another layout stamp: other Lua scripts or keys) are alive on the
 * queue; this one must not run beside them.
 */
export class LayoutMismatchError extends LlmqError {
  readonly theirs: string;
  constructor(
    queue: string,
    ours: string,
    live: { readonly stamp: string; readonly workers: number; readonly leftMs: number },
  ) {
    super(
      'LAYOUT_MISMATCH',
      `queue "${queue}" is served by ${live.workers} worker(s) of another llmq build (layout ${live.stamp}; this build is ${ours}): ` +
        `stop those workers first, or wait until they are gone (a stopped or dead worker's entry lapses within ${Math.ceil(live.leftMs / 1000)} s), then start this one`,
    );
    this.theirs = live.stamp;
  }
}

/** The queue holds jobs of a newer format than this build reads (a newer build wrote them). */
export class JobFormatError extends LlmqError {
  constructor(queue: string, written: number, reads: number) {
    super(
      'LAYOUT_MISMATCH',
      `queue "${queue}" holds jobs of format ${written}, written by a newer llmq build; this build reads up to format ${reads}: run workers of that newer build (or newer) on this queue`,
    );
  }
}

/** Redis did not answer at the configured URL. */
export class RedisUnavailableError extends LlmqError {
  readonly url: string;
  constructor(url: string, detail: string, options?: { cause?: unknown }) {
    super(
      'REDIS_UNAVAILABLE',
      `Redis at ${redactUrl(url)} did not answer (${detail}): start Redis or set REDIS_URL`,
      options,
    );
    this.url = redactUrl(url);
  }
}

/**
 * Redis refused a write because it reached its `maxmemory` (`-OOM`, or `EXECABORT` of a
 * transaction it refused for that): nothing of the command was written.
 */
export class RedisOutOfMemoryError extends LlmqError {
  constructor(url: string, options?: { cause?: unknown }) {
    super(
      'REDIS_OUT_OF_MEMORY',
      `Redis at ${redactUrl(url)} is out of memory (its maxmemory is reached) and refused the command; ` +
        'nothing was written: raise maxmemory, lower LLMQ_MAX_DEPTH_BYTES, or let workers drain the queue',
      options,
    );
  }
}

/**
 * The shared limiter could not answer (Redis down, script error). The limiter fails closed:
 * nothing was admitted and no budget was spent.
 */
export class LimiterUnavailableError extends LlmqError {
  constructor(detail: string, options?: { cause?: unknown }) {
    super(
      'LIMITER_UNAVAILABLE',
      `the shared limiter could not answer (${detail}); nothing was admitted: check Redis`,
      options,
    );
  }
}

/**
 * A request's cost can never fit under a limit, however long it waits: refused at enqueue
 * instead of waiting forever.
 *
 * @example
 * ```ts
 * try {
 *   await producer.enqueue(hugeRequest);
 * } catch (err) {
 *   if (err instanceof CostExceedsLimitError) console.log(`${err.cost} ${err.dimension} > ${err.limit} (${err.scope})`);
 * }
 * ```
 */
export class CostExceedsLimitError extends LlmqError {
  /** The scope whose limit it exceeds (`global`, `tenant:acme`, `model:claude-sonnet-*`). */
  readonly scope: string;
  /** `requests`, `inputTokens`, `outputTokens` or `tokens`. */
  readonly dimension: string;
  /** What the request needs of it. */
  readonly cost: number;
  /** What the scope allows per window. */
  readonly limit: number;
  /** @internal */
  constructor(
    scope: string,
    dimension: string,
    cost: number,
    limit: number,
    parts?: { readonly inputTokens: number; readonly outputTokens: number },
  ) {
    super(
      'COST_EXCEEDS_LIMIT',
      `the request needs ${cost} ${dimension} but scope "${scope}" allows only ${limit} per window: ` +
        fitHint(dimension, cost, limit, parts),
    );
    this.scope = scope;
    this.dimension = dimension;
    this.cost = cost;
    this.limit = limit;
  }
}

/** What would make a cost fit: the part of the request that does not fit is the one named. */
function fitHint(
  dimension: string,
  cost: number,
  limit: number,
  parts: { readonly inputTokens: number; readonly outputTokens: number } | undefined,
): string {
  const raise = `or raise the limit to at least ${cost}`;
  const tooLong =
    'the input is too long for one call: shorten it or send it in parts (llmq batch summarize splits documents)';
  if (dimension === 'inputTokens') return `${tooLong}, ${raise}`;
  if (dimension === 'outputTokens') return `lower max_tokens to at most ${limit}, ${raise}`;
  if (dimension !== 'tokens') return raise;
  if (parts && parts.inputTokens >= limit) return `${tooLong}, ${raise}`;
  const over = cost - limit;
  if (parts)
    return `lower max_tokens to at most ${limit - parts.inputTokens} or shorten the input by ${over} tokens, ${raise}`;
  return `lower max_tokens or shorten the input by ${over} tokens together, ${raise}`;
}

/**
 * The queue (or a tenant's share of it) is at its depth bound, in jobs or in bytes; nothing was
 * added. Retry after `retryAfterMs`, or enqueue with `{ wait: true }` to wait for room.
 *
 * @example
 * ```ts
 * try {
 *   await producer.enqueue(request);
 * } catch (err) {
 *   if (!(err instanceof QueueFullError)) throw err;
 *   await new Promise((r) => setTimeout(r, err.retryAfterMs));
 * }
 * ```
 */
export class QueueFullError extends LlmqError {
  /** How long to wait before trying again, in milliseconds. */
  readonly retryAfterMs: number;
  /** Jobs (or bytes, when `unit` is `bytes`) waiting. */
  readonly depth: number;
  /** The bound. */
  readonly maxDepth: number;
  /** What the bound counts. */
  readonly unit: 'jobs' | 'bytes';
  /** Bytes of the tenant's dead letters, counted against its bytes bound with what waits. */
  readonly deadBytes: number;
  /** What is full and how full, without the advice (`queue "q" is full (4 waiting, bound 4)`). */
  readonly summary: string;
  /** @internal */
  constructor(
    what: string,
    depth: number,
    maxDepth: number,
    retryAfterMs: number,
    unit: 'jobs' | 'bytes' = 'jobs',
    deadBytes = 0,
  ) {
    const dead = deadBytes > 0 ? ` and ${formatBytes(deadBytes)} of dead letters` : '';
    const summary =
      unit === 'bytes'
        ? `${what} is full (${formatBytes(depth)} of requests waiting${dead}, bound ${formatBytes(maxDepth)})`
        : `${what} is full (${depth} waiting, bound ${maxDepth})`;
    const advice = deadBytes > 0 ? ', or retry or purge its dead letters (llmq dlq)' : '';
    super(
      'QUEUE_FULL',
      `${summary}: retry in ${Math.ceil(retryAfterMs / 1000)} s or enqueue with { wait: true }${advice}`,
    );
    this.deadBytes = deadBytes;
    this.summary = summary;
    this.depth = depth;
    this.maxDepth = maxDepth;
    this.retryAfterMs = retryAfterMs;
    this.unit = unit;
  }
}

/** A number of bytes for people: `512 B`, `1.5 KB`, `32 MB` (powers of 1024). */
export function formatBytes(n: number): string {
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : Number(v.toFixed(1))} ${units[i]}`;
}

/**
 * Hides the passwords of a URL such as redis://user:secret@host:6379 (also multi-host URLs,
 * which `new URL` rejects, and a `sentinelPassword=` option).
 */
export function redactUrl(url: string): string {
  const m = /^([a-z][a-z0-9+.-]*:\/\/)(.*)$/is.exec(url);
  let out = url;
  if (m) {
    const rest = m[2]!;
    const at = rest.lastIndexOf('@');
    const colon = rest.indexOf(':');
    if (at >= 0 && colon >= 0 && colon < at) {
      out = `${m[1]}${rest.slice(0, colon)}:***${rest.slice(at)}`;
    }
  }
  return out.replace(/([?&]sentinelPassword=)[^&]*/i, '$1***').replace(/\/$/, '');
}
