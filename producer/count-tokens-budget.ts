import { llmqKey, type QueueNames } from '../shared/keys.ts';
import { loadLuaScripts, runLua } from '../shared/lua-scripts.ts';
import type { RedisClient } from '../shared/redis.ts';

const SCRIPTS = loadLuaScripts(new URL('./lua', import.meta.url).pathname);

/** Seconds a minute's counters live past their minute. */
const COUNTER_TTL_S = 120;

/**
 * The fleet's budget for `count_tokens` (free at the provider, with its own requests per
 * minute): counts per minute in Redis, on Redis's clock, for the whole queue and per tenant,
 * shared by every `llmq serve` and producer of the queue.
 * @inline
 */
export interface CountTokensBudgetOptions {
  readonly redis: RedisClient;
  readonly names: QueueNames;
  /** Requests per minute for the whole queue. @default 100 */
  readonly rpm?: number;
  /** A tenant's own requests per minute, within `rpm`. @default every tenant `rpm` */
  readonly tenantRpm?: (tenant: string) => number;
}

/** A request taken from the budget, or the limit that is spent and when the minute ends. */
export type CountTokensGrant =
  | { readonly ok: true }
  | {
      readonly ok: false;
      /** `queue` or `tenant`: whose limit is spent. */
      readonly spent: 'queue' | 'tenant';
      readonly limit: number;
      readonly retryAfterS: number;
    };

/** The default requests per minute of count_tokens, as the API's first tier allows. */
export const COUNT_TOKENS_RPM = 100;

export class CountTokensBudget {
  readonly rpm: number;

  constructor(private readonly o: CountTokensBudgetOptions) {
    this.rpm = o.rpm ?? COUNT_TOKENS_RPM;
    if (!(Number.isInteger(this.rpm) && this.rpm >= 1)) {
      throw new TypeError(`Expected \`rpm\` to be a whole number from 1 up, got \`${this.rpm}\``);
    }
  }

  /** Takes one request of this minute for `tenant` ('' for none), or says which limit is spent. */
  async take(tenant = ''): Promise<CountTokensGrant> {
    const [sec] = await this.o.redis.time();
    const minute = String(Math.floor(Number(sec) / 60));
    const tenantRpm = Math.min(this.rpm, this.o.tenantRpm?.(tenant) ?? this.rpm);
    const reply = (await runLua(
      this.o.redis,
      SCRIPTS['countTokens']!,
      [
        llmqKey(this.o.names, 'count-tokens', minute),
        llmqKey(this.o.names, 'count-tokens', minute, 'tenant', tenant),
      ],
      [this.rpm, tenantRpm, COUNTER_TTL_S],
    )) as [number, number?];
    if (reply[0] === 0) return { ok: true };
    return {
      ok: false,
      spent: reply[0] === 2 ? 'tenant' : 'queue',
      limit: Number(reply[1]),
      retryAfterS: Math.max(1, (Number(minute) + 1) * 60 - Number(sec)),
    };
  }
}
