import type { QueueNames } from '../../shared/keys.ts';
import { isOutOfMemory, type RedisClient } from '../../shared/redis.ts';
import { CountTokensBudget } from '../count-tokens-budget.ts';
import { apiError, toApiError } from './anthropic-errors.ts';

export interface CountTokensOptions {
  readonly redis: RedisClient;
  readonly names: QueueNames;
  /** The workers' provider key (never a caller's). */
  readonly apiKey: string;
  /** @default 'https://api.anthropic.com' */
  readonly baseURL?: string | undefined;
  /** Requests per minute forwarded by every server of the queue together. @default 100 */
  readonly rpm?: number;
  /**
   * A tenant's own requests per minute (the keys file's `count-tokens-rpm`), within `rpm`.
   * @default every tenant `rpm`
   */
  readonly tenantRpm?: (tenant: string) => number;
  /** @default 30_000 */
  readonly timeoutMs?: number;
  /** Called when Redis refuses the count for its maxmemory (the caller is answered 503). */
  readonly onRedisOutOfMemory?: (err: Error) => void;
}

export interface ForwardedAnswer {
  readonly status: number;
  /** JSON text, as the provider sent it. */
  readonly body: string;
  readonly headers: Readonly<Record<string, string>>;
}

export interface ForwardHeaders {
  readonly version?: string | undefined;
  readonly beta?: string | undefined;
  /** Whose budget the request is counted in. @default '' (one budget for callers without one) */
  readonly tenant?: string | undefined;
}

const answer = (a: ReturnType<typeof apiError>): ForwardedAnswer => ({
  status: a.status,
  body: JSON.stringify(a.body),
  headers: a.headers,
});

/**
 * Forwards `POST /v1/messages/count_tokens` to the provider with the workers' key, under its own
 * request limits: per minute for the queue and per tenant (counts in Redis, on Redis's clock,
 * shared by every server). Over a limit it answers 429 with retry-after; the provider's answer,
 * error or not, goes back as is.
 */
export class CountTokensForwarder {
  private readonly url: string;
  private readonly budget: CountTokensBudget;

  constructor(private readonly o: CountTokensOptions) {
    this.url = `${(o.baseURL ?? 'https://api.anthropic.com').replace(/\/+$/, '')}/v1/messages/count_tokens`;
    this.budget = new CountTokensBudget(o);
  }

  async forward(body: unknown, h: ForwardHeaders): Promise<ForwardedAnswer> {
    let refused: ForwardedAnswer | undefined;
    try {
      refused = await this.count(h.tenant ?? '');
    } catch (err) {
      if (!isOutOfMemory(err)) throw err;
      this.o.onRedisOutOfMemory?.(err as Error);
      return answer(toApiError(err));
    }
    if (refused) return refused;
    let res: Response;
    try {
      res = await fetch(this.url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-api-key': this.o.apiKey,
          'anthropic-version': h.version ?? '2023-06-01',
          ...(h.beta ? { 'anthropic-beta': h.beta } : {}),
        },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(this.o.timeoutMs ?? 30_000),
      });
    } catch (err) {
      return answer(
        apiError(
          'api_error',
          `llmq: the provider did not answer count_tokens (${(err as Error).message})`,
        ),
      );
    }
    const requestId = res.headers.get('request-id');
    const retryAfter = res.headers.get('retry-after');
    return {
      status: res.status,
      body: await res.text(),
      headers: {
        ...(requestId ? { 'request-id': requestId } : {}),
        ...(retryAfter ? { 'retry-after': retryAfter } : {}),
      },
    };
  }

  /** Counts the request in this minute's budgets; the 429 when one is spent. */
  private async count(tenant: string): Promise<ForwardedAnswer | undefined> {
    const grant = await this.budget.take(tenant);
    if (grant.ok) return undefined;
    const whose = grant.spent === 'tenant' ? `for tenant "${tenant}"` : 'on this queue';
    return answer(
      apiError(
        'rate_limit_error',
        `llmq: count_tokens is limited to ${grant.limit} requests per minute ${whose}`,
        { 'retry-after': String(grant.retryAfterS) },
      ),
    );
  }
}
