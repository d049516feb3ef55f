import { llmqKey, type QueueNames } from '../../shared/keys.ts';
import type { RedisClient } from '../../shared/redis.ts';
import { apiError } from './anthropic-errors.ts';

export interface CountTokensOptions {
  readonly redis: RedisClient;
  readonly names: QueueNames;
  /** The workers' provider key (never a caller's). */
  readonly apiKey: string;
  /** @default 'https://api.anthropic.com' */
  readonly baseURL?: string | undefined;
  /** Requests per minute forwarded by every server of the queue together. @default 100 */
  readonly rpm?: number;
  /** @default 30_000 */
  readonly timeoutMs?: number;
}

export interface ForwardedAnswer {
  readonly status: number;
  /** JSON text, as the provider sent it. */
  readonly body: string;
  readonly headers: Readonly<Record<string, string>>;
}

/**
 * Forwards `POST /v1/messages/count_tokens` to the provider with the workers' key, under its own
 * request limit (a per-minute count in Redis, on Redis's clock, shared by every server). Over the
 * limit it answers 429 with retry-after; the provider's answer, error or not, goes back as is.
 */
export class CountTokensForwarder {
  private readonly url: string;
  private readonly rpm: number;

  constructor(private readonly o: CountTokensOptions) {
    this.url = `${(o.baseURL ?? 'https://api.anthropic.com').replace(/\/+$/, '')}/v1/messages/count_tokens`;
    this.rpm = o.rpm ?? 100;
    if (!(Number.isInteger(this.rpm) && this.rpm >= 1)) {
      throw new TypeError(`Expected \`rpm\` to be a whole number from 1 up, got \`${this.rpm}\``);
    }
  }

  async forward(
    body: unknown,
    h: { readonly version?: string | undefined; readonly beta?: string | undefined },
  ): Promise<ForwardedAnswer> {
    const [sec] = await this.o.redis.time();
    const minute = Math.floor(Number(sec) / 60);
    const key = llmqKey(this.o.names, 'count-tokens', String(minute));
    const [[, n]] = (await this.o.redis.multi().incr(key).expire(key, 120).exec()) as [
      [null, number],
    ];
    if (n > this.rpm) {
      const a = apiError(
        'rate_limit_error',
        `llmq: count_tokens is limited to ${this.rpm} requests per minute on this queue`,
        { 'retry-after': String(Math.max(1, (minute + 1) * 60 - Number(sec))) },
      );
      return { status: a.status, body: JSON.stringify(a.body), headers: a.headers };
    }
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
      const a = apiError(
        'api_error',
        `llmq: the provider did not answer count_tokens (${(err as Error).message})`,
      );
      return { status: a.status, body: JSON.stringify(a.body), headers: a.headers };
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
}
