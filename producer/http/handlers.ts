import { LlmqError, QueueFullError, type RequestValidationError } from '../../shared/errors.ts';
import { isOutOfMemory } from '../../shared/redis.ts';
import type { RedisAuthThrottle } from '../../shared/redis-auth-throttle.ts';
import { isRedisDown } from '../errors.ts';
import { type ApiKeyStore, presentedKey } from './api-keys.ts';

/** A request as the framework-free handlers see it; adapters build it from their framework's. */
export interface HandlerRequest {
  readonly params: Readonly<Record<string, string | undefined>>;
  readonly query: Readonly<Record<string, string | undefined>>;
  /** The parsed JSON body (undefined when there was none). */
  readonly body: unknown;
  /** Lower-case header names. */
  readonly headers: Readonly<Record<string, string | undefined>>;
  /** Who is calling; set by the adapter from the route's {@link Authenticate}. */
  readonly auth?: Caller | undefined;
  /** Aborted when the client goes away (long polls stop waiting). */
  readonly signal?: AbortSignal | undefined;
}

export interface HandlerResponse {
  readonly status: number;
  readonly body: unknown;
  readonly headers?: Readonly<Record<string, string>>;
  /** The error behind a 5xx: logged with the request's id, never sent. */
  readonly cause?: unknown;
}

export type Handler = (req: HandlerRequest) => Promise<HandlerResponse>;

/** Who is calling: the tenant of the key, and what the key may ask. */
export interface Caller {
  readonly tenant: string;
  /** The most urgent priority the key may ask (1 the most urgent); undefined for any. */
  readonly maxPriority?: number | undefined;
}

/**
 * Decides who is calling from the headers and the peer's address alone, before the body is
 * read: the caller, or the answer that refuses the request.
 */
export type Authenticate = (req: {
  readonly headers: Readonly<Record<string, string | undefined>>;
  readonly address: string;
}) => Promise<Caller | HandlerResponse>;

export interface Route {
  readonly method: 'GET' | 'POST' | 'DELETE';
  /** `:name` segments become params. */
  readonly path: string;
  readonly handler: Handler;
  /** Run by the adapter before the body is read; absent on a public route. */
  readonly authenticate?: Authenticate;
}

/** The stable error codes of the HTTP API. */
export type ApiErrorCode =
  | 'invalid_json'
  | 'invalid_request'
  | 'unsupported_media_type'
  | 'body_too_large'
  | 'headers_too_large'
  | 'request_timeout'
  | 'unauthorized'
  | 'conflicting_credentials'
  | 'priority_not_allowed'
  | 'idempotency_conflict'
  | 'too_many_auth_failures'
  | 'not_found'
  | 'job_not_found'
  | 'job_not_cancellable'
  | 'queue_full'
  | 'cost_exceeds_limit'
  | 'budget_exhausted'
  | 'redis_unavailable'
  | 'redis_out_of_memory'
  | 'internal_error';

/** `{ error: { code, message, field? } }` with its status. */
export function errorResponse(
  status: number,
  code: ApiErrorCode,
  message: string,
  extra: { field?: string | undefined; headers?: Record<string, string> } = {},
): HandlerResponse {
  const error =
    extra.field === undefined ? { code, message } : { code, message, field: extra.field };
  return { status, body: { error }, ...(extra.headers ? { headers: extra.headers } : {}) };
}

/** Maps llmq's typed errors to HTTP answers; anything else is a 500 that reveals nothing. */
export function toErrorResponse(err: unknown): HandlerResponse {
  if (err instanceof QueueFullError) {
    const seconds = Math.max(1, Math.ceil(err.retryAfterMs / 1000));
    return errorResponse(429, 'queue_full', `${err.summary}: retry in ${seconds} s (Retry-After)`, {
      headers: { 'retry-after': String(seconds) },
    });
  }
  if (isOutOfMemory(err)) {
    return errorResponse(
      503,
      'redis_out_of_memory',
      'the queue is out of memory (Redis reached its maxmemory): nothing was written; try again later',
      { headers: { 'retry-after': '5' } },
    );
  }
  if (isRedisDown(err)) {
    return errorResponse(
      503,
      'redis_unavailable',
      'the queue is unavailable (Redis did not answer): try again later',
      { headers: { 'retry-after': '5' } },
    );
  }
  if (err instanceof LlmqError) {
    switch (err.code) {
      case 'REQUEST_INVALID':
        return errorResponse(400, 'invalid_request', err.message, {
          field: (err as RequestValidationError).field,
        });
      case 'PRIORITY_NOT_ALLOWED':
        return errorResponse(403, 'priority_not_allowed', err.message, { field: 'priority' });
      case 'IDEMPOTENCY_CONFLICT':
        return errorResponse(409, 'idempotency_conflict', err.message, {
          field: 'idempotency_key',
        });
      case 'COST_EXCEEDS_LIMIT':
        return errorResponse(422, 'cost_exceeds_limit', err.message);
      case 'BUDGET_EXHAUSTED':
        return errorResponse(402, 'budget_exhausted', err.message);
      case 'JOB_NOT_FOUND':
        return errorResponse(404, 'job_not_found', err.message);
      default:
        break;
    }
  }
  return { ...errorResponse(500, 'internal_error', 'internal error'), cause: err };
}

const UNAUTHORIZED = errorResponse(
  401,
  'unauthorized',
  'a valid API key is required: send it as x-api-key: <key> or Authorization: Bearer <key>',
  { headers: { 'www-authenticate': 'Bearer' } },
);

/** The answer to an address the throttle refuses, in this API's shape. */
function throttled(retryAfterMs: number): HandlerResponse {
  const seconds = Math.max(1, Math.ceil(retryAfterMs / 1000));
  return errorResponse(
    429,
    'too_many_auth_failures',
    `too many failed authentications from this address: try again in ${seconds} s`,
    { headers: { 'retry-after': String(seconds) } },
  );
}

const CONFLICTING = errorResponse(
  401,
  'conflicting_credentials',
  'the request carries two different API keys (x-api-key and Authorization: Bearer): send one',
  { headers: { 'www-authenticate': 'Bearer' } },
);

/**
 * API keys, sent as `x-api-key` (as the Anthropic SDK sends them) or `Authorization: Bearer`,
 * with failed attempts counted per address when a throttle is given (shared with the gateway's
 * and every other server's): an address refused by it gets 429 `too_many_auth_failures`,
 * whatever key it sends.
 */
export function apiKeyAuth(keys: ApiKeyStore, throttle?: RedisAuthThrottle): Authenticate {
  return async ({ headers, address }) => {
    const verdict = await throttle?.check(address);
    if (verdict && !verdict.ok) return throttled(verdict.retryAfterMs);
    const presented = presentedKey(headers);
    if (presented && 'conflict' in presented) return CONFLICTING;
    const entry = presented ? keys.entryOf(presented.key) : undefined;
    if (entry === undefined) {
      // A request without credentials is not a guess; a wrong or malformed one is.
      if (headers['authorization'] !== undefined || headers['x-api-key'] !== undefined)
        await throttle?.failed(address);
      return UNAUTHORIZED;
    }
    return { tenant: entry.tenant, maxPriority: entry.maxPriority };
  };
}

/** A guard: answers 401 unless the adapter authenticated the request. */
export function withAuth(handler: Handler): Handler {
  return async (req) => (req.auth ? handler(req) : UNAUTHORIZED);
}

/** Turns typed errors thrown by a handler into answers. */
export function caught(handler: Handler): Handler {
  return async (req) => {
    try {
      return await handler(req);
    } catch (err) {
      return toErrorResponse(err);
    }
  };
}
