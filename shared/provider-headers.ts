/**
 * Reading the provider's answers: the `anthropic-ratelimit-*` headers and `retry-after`.
 */

/** Headers as the SDK gives them (fetch `Headers`) or as a plain record. */
export type HeaderSource =
  | { get(name: string): string | null }
  | Record<string, string | string[] | undefined>;

export function header(headers: HeaderSource | undefined, name: string): string | undefined {
  if (!headers) return undefined;
  if (typeof (headers as { get?: unknown }).get === 'function') {
    return (headers as { get(n: string): string | null }).get(name) ?? undefined;
  }
  const v = (headers as Record<string, string | string[] | undefined>)[name.toLowerCase()];
  return Array.isArray(v) ? v[0] : v;
}

export interface ProviderLimitReading {
  readonly limit: number;
  /** As the provider gave it: Anthropic rounds token figures to the nearest thousand. */
  readonly remaining: number;
  /** When the provider says the dimension is fully replenished (ms since the epoch). */
  readonly resetMs: number | undefined;
}

export type ProviderDimension = 'requests' | 'inputTokens' | 'outputTokens' | 'tokens';

const HEADER_NAMES: Record<ProviderDimension, string> = {
  requests: 'requests',
  inputTokens: 'input-tokens',
  outputTokens: 'output-tokens',
  tokens: 'tokens',
};

function int(v: string | undefined): number | undefined {
  if (v === undefined || !/^\d+$/.test(v.trim())) return undefined;
  return Number(v.trim());
}

/** What the provider's rate-limit headers say, by dimension (those it gave figures for). */
export type ProviderReading = Partial<Record<ProviderDimension, ProviderLimitReading>>;

/** Parses `anthropic-ratelimit-{requests,input-tokens,output-tokens,tokens}-*`. */
export function readRateLimitHeaders(headers: HeaderSource | undefined): ProviderReading {
  const out: ProviderReading = {};
  for (const [dim, name] of Object.entries(HEADER_NAMES) as [ProviderDimension, string][]) {
    // The limit first: a dimension the provider does not report costs one lookup, not three.
    const limit = int(header(headers, `anthropic-ratelimit-${name}-limit`));
    if (limit === undefined) continue;
    const remaining = int(header(headers, `anthropic-ratelimit-${name}-remaining`));
    if (remaining === undefined) continue;
    const resetRaw = header(headers, `anthropic-ratelimit-${name}-reset`);
    const reset = resetRaw ? Date.parse(resetRaw) : Number.NaN;
    out[dim] = {
      limit,
      remaining,
      resetMs: Number.isFinite(reset) ? reset : undefined,
    };
  }
  return out;
}

/**
 * The wait a 429 asks for, in ms: `retry-after-ms`, else `retry-after` as seconds or an HTTP
 * date. Undefined when the provider gave none (a spend cap, or an unknown cause).
 */
export function retryAfterMs(
  headers: HeaderSource | undefined,
  nowMs = Date.now(),
): number | undefined {
  const ms = header(headers, 'retry-after-ms');
  if (ms !== undefined && Number.isFinite(Number(ms)) && Number(ms) >= 0) return Number(ms);
  const ra = header(headers, 'retry-after');
  if (ra === undefined || ra.trim() === '') return undefined;
  const seconds = Number(ra);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const date = Date.parse(ra);
  return Number.isFinite(date) ? Math.max(0, date - nowMs) : undefined;
}
