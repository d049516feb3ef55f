import { ConfigError, LimiterUnavailableError } from './errors.ts';
import { pageCostsKey, type QueueNames } from './keys.ts';
import { PDF_PAGE_TOKENS } from './media-estimate.ts';
import type { RedisClient } from './redis.ts';

/**
 * What a PDF page costs at the provider, learned per model from what it counted: every call
 * with PDFs (and every count_tokens answer for one) gives the tokens counted over the pages
 * sent, the whole prompt charged to the pages, so an observation errs high. The fleet keeps the
 * latest observations in Redis; a page is reserved at the largest of them plus a margin, never
 * above {@link PDF_PAGE_TOKENS} (the most the API charges a page), which is also what a page is
 * reserved at before `minSamples` observations are in (the learning is cold).
 * @inline
 */
export interface PageCostsOptions {
  readonly redis: RedisClient;
  /** The learning's keys share the queue's hash tag. */
  readonly names: QueueNames;
  /** Observations kept, newest first; the largest of them is reserved. @default 20 */
  readonly recent?: number;
  /** Observations before they are trusted (the learning is warm). @default 4 */
  readonly minSamples?: number;
  /** Share added to the largest observation. @default 0.02 */
  readonly margin?: number;
  /** How long a reading is reused before it is read again, ms. @default 1_000 */
  readonly cacheMs?: number;
  /** The cache's clock. @default Date.now */
  readonly clock?: () => number;
}

/** What the fleet knows of a model's PDF pages now. */
export interface PageCostReading {
  /** Tokens to reserve for one page: learned when warm, {@link PDF_PAGE_TOKENS} when cold. */
  readonly perPage: number;
  /** Enough observations to trust them. */
  readonly warm: boolean;
  readonly observations: number;
  /** The least and the most a page cost in the observations kept (0 when none). */
  readonly low: number;
  readonly high: number;
}

/** One observation: the provider counted `tokens` for a request holding `pages` PDF pages. */
export interface PageObservation {
  readonly tokens: number;
  readonly pages: number;
}

const MODEL = /^[^\s]{1,200}$/;

export class PageCosts {
  private readonly redis: RedisClient;
  private readonly names: QueueNames;
  private readonly recent: number;
  private readonly minSamples: number;
  private readonly margin: number;
  private readonly cacheMs: number;
  private readonly clock: () => number;
  private readonly cache = new Map<string, { reading: PageCostReading; at: number }>();

  constructor(o: PageCostsOptions) {
    this.redis = o.redis;
    this.names = o.names;
    this.recent = o.recent ?? 20;
    this.minSamples = o.minSamples ?? 4;
    this.margin = o.margin ?? 0.02;
    this.cacheMs = o.cacheMs ?? 1_000;
    this.clock = o.clock ?? Date.now;
    const whole = (v: number) => Number.isInteger(v) && v >= 1;
    if (!whole(this.recent) || this.recent > 1_000)
      throw new ConfigError(
        `PageCosts recent must be a whole number from 1 to 1000, got ${this.recent}`,
      );
    if (!whole(this.minSamples) || this.minSamples > this.recent)
      throw new ConfigError(
        `PageCosts minSamples must be a whole number from 1 to recent (${this.recent}), got ${this.minSamples}`,
      );
    if (!(this.margin >= 0 && this.margin <= 1))
      throw new ConfigError(`PageCosts margin must be a share from 0 to 1, got ${this.margin}`);
  }

  /** Records what the provider counted for requests with PDF pages (those without are skipped). */
  async record(model: string, observations: readonly PageObservation[]): Promise<void> {
    const perPage = observations
      .filter((o) => o.pages > 0 && Number.isFinite(o.tokens) && o.tokens >= 0)
      .map((o) => Math.min(PDF_PAGE_TOKENS, Math.ceil(o.tokens / o.pages)));
    if (perPage.length === 0) return;
    const key = this.keyOf(model);
    try {
      await this.redis
        .multi()
        .lpush(key, ...perPage)
        .ltrim(key, 0, this.recent - 1)
        .exec();
    } catch (err) {
      throw new LimiterUnavailableError((err as Error).message, { cause: err });
    }
    this.cache.delete(model);
  }

  /** What a model's pages cost, read again once the cached reading is `cacheMs` old. */
  async read(model: string): Promise<PageCostReading> {
    const cached = this.cache.get(model);
    if (cached && this.clock() - cached.at < this.cacheMs) return cached.reading;
    let kept: string[];
    try {
      kept = await this.redis.lrange(this.keyOf(model), 0, this.recent - 1);
    } catch (err) {
      throw new LimiterUnavailableError((err as Error).message, { cause: err });
    }
    const reading = this.readingOf(kept.map(Number).filter((v) => v > 0));
    this.cache.set(model, { reading, at: this.clock() });
    return reading;
  }

  /** The reading read last for a model, however old; cold before any. */
  cached(model: string): PageCostReading {
    return this.cache.get(model)?.reading ?? this.readingOf([]);
  }

  /** Forgets a model's pages (its next PDFs are reserved at the ceiling). */
  async forget(model: string): Promise<void> {
    this.cache.delete(model);
    await this.redis.del(this.keyOf(model));
  }

  private keyOf(model: string): string {
    if (typeof model !== 'string' || !MODEL.test(model))
      throw new ConfigError(
        `model must be a model name of 1 to 200 characters without spaces, got ${JSON.stringify(model)}`,
      );
    return pageCostsKey(this.names, model);
  }

  private readingOf(values: readonly number[]): PageCostReading {
    const observations = values.length;
    const high = observations > 0 ? Math.max(...values) : 0;
    const low = observations > 0 ? Math.min(...values) : 0;
    const warm = observations >= this.minSamples;
    const perPage = warm
      ? Math.min(PDF_PAGE_TOKENS, Math.ceil(high * (1 + this.margin)))
      : PDF_PAGE_TOKENS;
    return { perPage, warm, observations, low, high };
  }
}
