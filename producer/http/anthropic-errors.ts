import { randomBytes } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import { API_ERROR_STATUS, type ApiErrorType } from '../../shared/api-error-types.ts';
import { BudgetExhaustedError } from '../../shared/budgets.ts';
import {
  CostExceedsLimitError,
  IdempotencyConflictError,
  ModelNotServedError,
  PriorityNotAllowedError,
  QueueFullError,
  RequestValidationError,
} from '../../shared/errors.ts';
import type { DeadLetter } from '../../shared/job.ts';
import { isOutOfMemory } from '../../shared/redis.ts';
import { isRedisDown } from '../errors.ts';

/** An answer of the gateway in the API's shape: `{"type":"error","error":{type,message}}`. */
export interface ApiErrorAnswer {
  readonly status: number;
  readonly body: {
    readonly type: 'error';
    readonly error: { type: string; message: string };
    /** The answer's `request-id`, as the API repeats it in error bodies. */
    readonly request_id?: string;
  };
  readonly headers: Readonly<Record<string, string>>;
}

export function apiError(
  type: ApiErrorType,
  message: string,
  headers: Record<string, string> = {},
): ApiErrorAnswer {
  return {
    status: API_ERROR_STATUS[type],
    body: { type: 'error', error: { type, message } },
    headers,
  };
}

/** A `request-id` for an answer llmq gives itself (the provider's own is passed on where there is one). */
export function newRequestId(): string {
  return `req_llmq_${randomBytes(12).toString('hex')}`;
}

/** The status line's reason: Node's, and the API's own for 529 (Node knows none for it). */
export function statusText(status: number): string {
  return status === 529 ? 'Overloaded' : (STATUS_CODES[status] ?? 'Error');
}

/** Errors refused before anything was queued that can never succeed as sent: 400 at once. */
const CANNOT_FIT = new Set(['CostExceedsLimitError', 'BudgetExhaustedError']);

/** Maps an error thrown while enqueueing to the API's answer; unknown errors reveal nothing. */
export function toApiError(err: unknown): ApiErrorAnswer {
  if (err instanceof QueueFullError) {
    const seconds = Math.max(1, Math.ceil(err.retryAfterMs / 1000));
    return apiError('rate_limit_error', `llmq: ${err.message}`, { 'retry-after': String(seconds) });
  }
  if (err instanceof ModelNotServedError) {
    return apiError('not_found_error', `model: ${err.model} (llmq: ${err.issues[0]?.message})`);
  }
  if (err instanceof RequestValidationError) {
    const first = err.issues[0];
    return apiError(
      'invalid_request_error',
      first ? `${first.field}: ${first.message}` : err.message,
    );
  }
  if (err instanceof IdempotencyConflictError) {
    // The SDK retries a 409 unless told not to; the same request cannot succeed later.
    return apiError('conflict_error', `idempotency-key: ${err.message}`, {
      'x-should-retry': 'false',
    });
  }
  if (err instanceof PriorityNotAllowedError) {
    return apiError('permission_error', `llmq-priority: ${err.message}`);
  }
  if (err instanceof CostExceedsLimitError) {
    const field = err.dimension === 'inputTokens' ? 'messages' : 'max_tokens';
    return apiError('invalid_request_error', `${field}: ${err.message}`);
  }
  if (err instanceof BudgetExhaustedError) {
    return apiError('invalid_request_error', `llmq: ${err.message}`);
  }
  if (isOutOfMemory(err)) {
    // 503 as the job API answers; the SDK retries a 5xx (honouring retry-after) and clients
    // treat overloaded_error as "back off and retry", which is what helps here.
    return {
      ...apiError(
        'overloaded_error',
        'llmq: the queue is out of memory (Redis reached its maxmemory); nothing was queued: retry later',
        { 'retry-after': '5' },
      ),
      status: 503,
    };
  }
  if (isRedisDown(err)) {
    return apiError('overloaded_error', 'llmq: the queue is unavailable (Redis did not answer)', {
      'retry-after': '5',
    });
  }
  return apiError('api_error', 'llmq: internal error');
}

/**
 * The answer for a dead-lettered job: the provider's own status and error when it gave one; a
 * 400 for a job no worker could ever admit (a cost over a limit, a budget it can never fit), as
 * the gateway answers such a request before queueing it, so a client does not send it again.
 */
export function deadLetterError(reason: string, dead: DeadLetter | undefined): ApiErrorAnswer {
  const status = dead?.status;
  if (status !== undefined && status >= 400 && dead?.providerType) {
    return {
      status,
      body: {
        type: 'error',
        error: { type: dead.providerType, message: dead.providerMessage ?? reason },
      },
      headers: {},
    };
  }
  if (dead && CANNOT_FIT.has(dead.errorClass)) {
    return apiError('invalid_request_error', `llmq: ${reason}`);
  }
  return apiError('api_error', `llmq: the call failed: ${reason}`);
}
