import type Anthropic from '@anthropic-ai/sdk';
import type { Cost } from './estimate.ts';
import type { MessagesRequest } from './request.ts';

/**
 * What a flow's combine job carries: the worker builds its request when it runs, from its
 * template (the job's `request`) and the answers of its part jobs (BullMQ children).
 */
export interface CombineSpec {
  /** The part jobs' ids, in order. */
  readonly parts: readonly string[];
}

/** A request's PDF pages and the tokens reserved for each. */
export interface PdfPages {
  readonly pages: number;
  readonly perPage: number;
}

/** One try of a job, as the dead letters and `llmq dlq show` report it. */
export interface AttemptRecord {
  /** When the call began (ms since the epoch). */
  readonly at: number;
  /** `ok`, `rate_limited` (429 with retry-after; costs no attempt), `retryable`, `final`. */
  readonly outcome: 'ok' | 'rate_limited' | 'retryable' | 'final';
  readonly status?: number | undefined;
  readonly errorClass?: string | undefined;
  readonly message?: string | undefined;
  readonly latencyMs?: number | undefined;
  /**
   * Whether this try spent one of the job's attempts (429s, breaker trials and transient
   * failures do not).
   */
  readonly counted?: boolean | undefined;
  /** A transient failure (529, 5xx, timeout, dropped connection): retried by time, not by count. */
  readonly transient?: true | undefined;
  /** The deployment of the pool the try went to (absent without a pool). */
  readonly deployment?: string | undefined;
}

/** Since when a job's transient failures have been retried (see worker/retry-for.ts). */
export interface RetryClock {
  /** When its first transient failure was seen (ms since the epoch, on Redis's clock). */
  readonly since: number;
  /** The breaker's outage total then, in ms: time behind an open breaker does not count. */
  readonly outageMs: number;
}

/**
 * The newest job format this build writes and reads (`JobData.v`). A queue holding a newer one
 * (`queueStampKey`) is refused by this build's workers.
 */
export const JOB_FORMAT = 1;

/** What a BullMQ job of llmq carries. Never holds a secret. */
export interface JobData {
  readonly v: 1;
  readonly request: MessagesRequest;
  /** The request's digest (shared/request-digest.ts); absent in jobs of older producers. */
  readonly digest?: string | undefined;
  /** The estimate reserved before the call (the worker scales its input by what it learned). */
  readonly cost: Cost;
  /** The input was counted by the provider's count_tokens: exact, reserved as is. */
  readonly inputCounted?: true | undefined;
  /**
   * The request's PDF pages, in `cost` at the most a page costs (`PDF_PAGE_TOKENS`), and what
   * the producer reserved each at (learned from usage, shared/page-costs.ts): the gate reserves
   * a page at no more than that, less once the fleet has learned less.
   */
  readonly pdfPages?: PdfPages | undefined;
  readonly priority: number;
  readonly tenant?: string | undefined;
  /** Nested limiter scopes besides the global one (`tenant:acme`). */
  readonly scopes?: readonly string[] | undefined;
  /** Stream the response even when max_tokens does not need it. */
  readonly stream?: boolean | undefined;
  /**
   * A caller reads the provider's stream events as they come (the gateway's `stream: true`):
   * the worker appends them to the job's event stream (`jobEventsKey`).
   */
  readonly relayEvents?: boolean | undefined;
  /** `anthropic-version` / `anthropic-beta` the caller sent, sent with the call (never a key). */
  readonly providerHeaders?: Readonly<Record<string, string>> | undefined;
  /** Per-call timeout in ms. */
  readonly timeoutMs?: number | undefined;
  /**
   * How long transient failures are retried, in ms from the first; 0 makes them spend attempts
   * like other retryable failures. Absent: the worker's `retryForMs` (default 10 minutes).
   */
  readonly retryForMs?: number | undefined;
  /** Set by the worker at the job's first transient failure. */
  readonly retrying?: RetryClock | undefined;
  readonly idempotencyKey?: string | undefined;
  readonly enqueuedAt: number;
  /** Free-form labels of the producer (the batch run puts the file path here). */
  readonly meta?: Readonly<Record<string, string>> | undefined;
  /** 429s with retry-after so far; they cost no attempt but are bounded. */
  readonly rateLimitReturns?: number | undefined;
  readonly history?: readonly AttemptRecord[] | undefined;
  /** When a batch-bound job must be done by (ms since the epoch); see producer/batches. */
  readonly deadlineAt?: number | undefined;
  /** A flow's combine job: its request is built from its part jobs' answers when it runs. */
  readonly combine?: CombineSpec | undefined;
  /** W3C traceparent of the job's enqueue span, when tracing is on. */
  readonly trace?: string | undefined;
  /** The deployment of the pool the job must go to (absent: any that serves its model). */
  readonly deployment?: string | undefined;
}

/**
 * The Message as stored: what a caller of the API would keep.
 * @inline
 */
export interface StoredMessage {
  readonly id: string;
  readonly model: string;
  readonly role: 'assistant';
  /** The answer's content blocks, as the SDK types them (`text`, `tool_use`, `thinking`, …). */
  readonly content: Anthropic.ContentBlock[];
  readonly stop_reason: Anthropic.StopReason | null;
  readonly stop_sequence: string | null;
  readonly usage: {
    readonly input_tokens: number;
    readonly output_tokens: number;
    readonly cache_creation_input_tokens?: number | null;
    readonly cache_read_input_tokens?: number | null;
  };
}

/**
 * A completed job's answer: the provider's Message as stored, and how the call went. What
 * `waitForResult` resolves with.
 *
 * @example
 * ```ts
 * const result: JobResult = await producer.waitForResult(id);
 * const text = result.message.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
 * console.log(text, result.message.usage.output_tokens, result.attempts);
 * ```
 */
export interface JobResult {
  /** The provider's answer. */
  readonly message: StoredMessage;
  /** How long the successful call took, ms. */
  readonly latencyMs: number;
  /** The provider's `request-id`. */
  readonly requestId: string | null;
  /** Attempts spent, the successful call included (transient failures and 429s spend none). */
  readonly attempts: number;
  /** When it completed (ms since the epoch). */
  readonly completedAt: number;
  /** The Message Batch that answered it (absent for a call through `messages`). */
  readonly batchId?: string | undefined;
  /** The deployment of the pool that answered it (absent without a pool). */
  readonly deployment?: string | undefined;
}

/** A dead letter: everything needed to understand and retry what could not succeed. */
export interface DeadLetter {
  readonly jobId: string;
  readonly queue: string;
  readonly data: JobData;
  /** Why it is here, in one line. */
  readonly reason: string;
  /** `RateLimitError`, `BadRequestError`, `AttemptsExhausted`… */
  readonly errorClass: string;
  readonly status?: number | undefined;
  /** The provider's error type, such as `invalid_request_error`. */
  readonly providerType?: string | undefined;
  readonly providerMessage?: string | undefined;
  readonly attempts: readonly AttemptRecord[];
  readonly deadAt: number;
}

/** How long transient failures are retried when neither the job nor the worker says. */
export const DEFAULT_RETRY_FOR_MS = 600_000;
/** The longest retryFor: a week, as long as a failed job is kept. */
export const MAX_RETRY_FOR_MS = 7 * 86_400_000;

/** The BullMQ job name of every llmq job. */
export const JOB_NAME = 'messages';
