import Anthropic from '@anthropic-ai/sdk';
import { header, retryAfterMs } from '../shared/provider-headers.ts';
import { ResponseTimeoutError } from './response-bounds.ts';

/**
 * What to do after a failed provider call.
 * - `rate_limited`: a 429 with retry-after (or a platform's throttling); pause every worker,
 *   requeue without spending an attempt.
 * - `retryable`: overloaded, server error, timeout, dropped connection, mid-stream error; back
 *   off and try again, and count toward the circuit breaker. The `transient` ones (the provider
 *   or the network, not the request) are retried for a time; the rest spend attempts.
 * - `final`: the request cannot succeed by retrying (4xx, a spend cap, a 429 without
 *   retry-after or with `x-should-retry: false`); dead-letter it at once.
 */
export type FailureKind = 'rate_limited' | 'retryable' | 'final';

export interface Classified {
  readonly kind: FailureKind;
  /** One line for people: what happened. */
  readonly reason: string;
  readonly errorClass: string;
  readonly status?: number | undefined;
  readonly providerType?: string | undefined;
  readonly providerMessage?: string | undefined;
  /** For `rate_limited`: how long the provider asked to wait. */
  readonly retryAfterMs?: number | undefined;
  /** Whether the provider may have charged the call (its reservation then stays spent). */
  readonly maybeCharged: boolean;
  /**
   * For `retryable`: a failure of the provider or the network (529, 5xx, 408, timeout, dropped
   * connection, an overloaded or api_error event mid-stream), retried by time (`retryForMs`).
   */
  readonly transient?: boolean | undefined;
  /** Nothing answers at the address (refused, no such host): the breaker opens at once. */
  readonly unreachable?: boolean | undefined;
  /** The key serves no call (401, 403, its spend limit): in a pool, its deployment's fault. */
  readonly keyRefused?: boolean | undefined;
}

/** Error types of an `event: error` mid-stream that say the provider, not the request, failed. */
const TRANSIENT_STREAM_ERRORS = new Set(['overloaded_error', 'api_error', 'timeout_error']);

const SPEND_CAP = /usage limits|spend limit|billing|credit balance|credits/i;

/**
 * How long a platform's throttling is waited out: Bedrock (`ThrottlingException`) and Vertex AI
 * (`RESOURCE_EXHAUSTED`) answer 429 without retry-after, and neither means a spent key. Their
 * quotas are counted per minute, so a throttle says the minute's share is gone: a second's
 * pause would only meet the next 429 (and spend the job's 429 returns); in a pool the other
 * deployments carry on meanwhile.
 */
export const PLATFORM_THROTTLE_MS = 10_000;

/** Whether a 429 is Bedrock's or Vertex AI's throttling. */
function platformThrottled(err: InstanceType<typeof Anthropic.APIError>): boolean {
  if (header(err.headers ?? undefined, 'x-amzn-errortype')?.startsWith('ThrottlingException'))
    return true;
  return (
    (err.error as { error?: { status?: unknown } } | undefined)?.error?.status ===
    'RESOURCE_EXHAUSTED'
  );
}

function providerError(err: InstanceType<typeof Anthropic.APIError>): {
  type?: string;
  message?: string;
  code?: string;
} {
  const body = err.error as
    | { error?: { type?: string; message?: string; details?: { error_code?: string } } }
    | undefined;
  return {
    type: body?.error?.type,
    message: body?.error?.message ?? err.message,
    code: body?.error?.details?.error_code,
  };
}

/** Errors that stop a request before a byte is sent: nobody listening, no such host. */
const UNSENT_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN']);

/**
 * Errors of a connection cut while the response was read: the SDK raises them as a plain
 * AnthropicError (`terminated`), with the socket's error as its cause.
 */
const CUT_CODES = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE']);

/** The first code of `codes` in the error or its causes. */
function codeAmong(err: unknown, codes: ReadonlySet<string>): string | undefined {
  let e: unknown = err;
  for (let depth = 0; e && depth < 5; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && codes.has(code)) return code;
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}

/** Classifies an error thrown by `@anthropic-ai/sdk` (or by the call around it). */
export function classifyProviderError(err: unknown): Classified {
  const errorClass = (err as Error)?.constructor?.name ?? 'Error';
  if (err instanceof ResponseTimeoutError) {
    // A silent provider: as a dropped connection, it may have admitted (and charged) the call.
    return {
      kind: 'retryable',
      reason: err.message,
      errorClass,
      maybeCharged: true,
      transient: true,
    };
  }
  if (err instanceof Anthropic.APIConnectionTimeoutError) {
    return {
      kind: 'retryable',
      reason: 'the call timed out',
      errorClass,
      maybeCharged: true,
      transient: true,
    };
  }
  if (err instanceof Anthropic.APIConnectionError) {
    const unsent = codeAmong(err, UNSENT_CODES);
    return {
      kind: 'retryable',
      reason: `connection failed: ${unsent ? `${unsent}, the request was not sent` : err.message}`,
      errorClass,
      maybeCharged: !unsent,
      transient: true,
      ...(unsent && unsent !== 'EAI_AGAIN' ? { unreachable: true } : {}),
    };
  }
  if (err instanceof Anthropic.APIError) return classifyApiError(err, errorClass);
  const message = (err as Error)?.message ?? String(err);
  const cut = codeAmong(err, CUT_CODES);
  if (cut) {
    return {
      kind: 'retryable',
      reason: `connection dropped during the response: ${cut}`,
      errorClass,
      maybeCharged: true,
      transient: true,
    };
  }
  return {
    kind: 'retryable',
    reason: `unexpected error: ${message}`,
    errorClass,
    maybeCharged: true,
  };
}

/** An error the API answered with (a status), or sent inside a stream that had begun (none). */
function classifyApiError(
  err: InstanceType<typeof Anthropic.APIError>,
  errorClass: string,
): Classified {
  const { type, message, code } = providerError(err);
  const base = { errorClass, status: err.status, providerType: type, providerMessage: message };
  const status = err.status;
  if (status === undefined) {
    // An `event: error` inside a stream that had already begun.
    return {
      ...base,
      kind: 'retryable',
      reason: `the stream failed: ${type ?? 'error'}: ${message}`,
      maybeCharged: true,
      transient: TRANSIENT_STREAM_ERRORS.has(type ?? ''),
    };
  }
  if (status === 429) return classifyRateLimit(err, base, message, code);
  if (status === 408 || status === 409 || status >= 500) {
    return {
      ...base,
      kind: 'retryable',
      reason: `${status} ${type ?? 'error'}: ${message}`,
      maybeCharged: true,
      // A 409 conflict is about the request; 408 and 5xx are the provider's.
      transient: status !== 409,
    };
  }
  return {
    ...base,
    kind: 'final',
    reason: `${status} ${type ?? 'error'}: ${message}`,
    // A request the API refused (400, 401, 403, 404, 413…) is neither billed nor served: its
    // tokens and its money's worst case come back.
    maybeCharged: false,
    ...(status === 401 || status === 403 ? { keyRefused: true } : {}),
  };
}

/**
 * A 429: a spent key, one the provider says not to retry, or one without retry-after (but a
 * platform's throttling) is final; the rest pause every worker for the retry-after.
 */
function classifyRateLimit(
  err: InstanceType<typeof Anthropic.APIError>,
  base: Pick<Classified, 'errorClass' | 'status' | 'providerType' | 'providerMessage'>,
  message: string | undefined,
  code: string | undefined,
): Classified {
  const wait =
    retryAfterMs(err.headers ?? undefined) ??
    (platformThrottled(err) ? PLATFORM_THROTTLE_MS : undefined);
  if (code === 'enforced_spend_limit_reached' || SPEND_CAP.test(message ?? '')) {
    return {
      ...base,
      kind: 'final',
      reason: `spend limit reached: ${message}`,
      maybeCharged: false,
      keyRefused: true,
    };
  }
  // The provider says waiting cannot help (the call alone exceeds its limit): pausing every
  // worker for it, again and again, would only stall the fleet.
  if (header(err.headers ?? undefined, 'x-should-retry')?.trim() === 'false') {
    return { ...base, kind: 'final', reason: `429 not retryable: ${message}`, maybeCharged: false };
  }
  if (wait === undefined) {
    return {
      ...base,
      kind: 'final',
      reason: `429 without retry-after: ${message}`,
      maybeCharged: false,
    };
  }
  return {
    ...base,
    kind: 'rate_limited',
    reason: `rate limited: ${message}`,
    retryAfterMs: wait,
    maybeCharged: false,
  };
}
