/**
 * What a client sees of the limits: the `anthropic-ratelimit-*` headers, `retry-after`, and the
 * wording of the rate-limit and spend-cap 429s.
 */

import type { Dimension, DimensionState } from './rate-limits.ts';

const HEADER_NAME: Record<Dimension, string> = {
  requests: 'requests',
  input_tokens: 'input-tokens',
  output_tokens: 'output-tokens',
  tokens: 'tokens',
};

const UNIT: Record<Dimension, string> = {
  requests: 'requests',
  input_tokens: 'input tokens',
  output_tokens: 'output tokens',
  tokens: 'tokens',
};

/** RFC 3339 UTC with whole seconds, rounded up so the moment is never early. */
export function rfc3339Seconds(ms: number): string {
  return new Date(Math.ceil(ms / 1000) * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** Whole seconds to wait, rounded up, at least 1. */
export function retryAfterSeconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}

/**
 * `anthropic-ratelimit-{requests,input-tokens,output-tokens,tokens}-{limit,remaining,reset}` for
 * each limited dimension. `remaining` is rounded down to an integer, and for the token dimensions
 * to the nearest multiple of `roundTokensTo` when it is above 0 (the real API rounds them to the
 * nearest thousand; `requests-remaining` is exact); `reset` is when the dimension is fully
 * replenished.
 */
export function rateLimitHeaders(
  states: Partial<Record<Dimension, DimensionState>>,
  roundTokensTo = 0,
): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [dimension, state] of Object.entries(states) as [Dimension, DimensionState][]) {
    const name = `anthropic-ratelimit-${HEADER_NAME[dimension]}`;
    const exact = Math.floor(state.remaining);
    const step = dimension === 'requests' ? 0 : roundTokensTo;
    headers[`${name}-limit`] = String(state.limit);
    headers[`${name}-remaining`] = String(step > 0 ? Math.round(exact / step) * step : exact);
    headers[`${name}-reset`] = rfc3339Seconds(state.resetAt);
  }
  return headers;
}

/** "per minute" for the real window, else "per 2 seconds", "per 1.5 seconds", "per 250 ms". */
export function describeWindow(windowMs: number): string {
  if (windowMs === 60_000) return 'per minute';
  if (windowMs === 1000) return 'per second';
  if (windowMs % 1000 === 0 || windowMs > 1000) {
    return `per ${Number((windowMs / 1000).toFixed(3))} seconds`;
  }
  return `per ${windowMs} ms`;
}

/** The 429 message, worded like the real one, naming the limit that refused. */
export function rateLimitMessage(
  dimension: Dimension,
  limit: number,
  windowMs: number,
  canEverFit: boolean,
): string {
  const rule = `${limit.toLocaleString('en-US')} ${UNIT[dimension]} ${describeWindow(windowMs)}`;
  const head = `This request would exceed the rate limit for your organization (mock-anthropic) of ${rule}.`;
  if (!canEverFit) {
    return (
      `${head} This request alone needs more than the limit, so it can never be admitted: ` +
      'reduce the prompt length or the maximum tokens requested.'
    );
  }
  return (
    `${head} For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the ` +
    'response headers for current usage. Please reduce the prompt length or the maximum tokens ' +
    'requested, or try again later.'
  );
}

/** The spend-cap 429 message; access returns on the first day of next month (UTC). */
export function spendCapMessage(now: number): string {
  const date = new Date(now);
  const next = new Date(Date.UTC(date.getUTCFullYear(), date.getUTCMonth() + 1, 1));
  const day = next.toISOString().slice(0, 10);
  return (
    "You have reached your API usage limits: your organization's monthly usage limit has been " +
    `reached. You will regain access on ${day} at 00:00 UTC.`
  );
}
