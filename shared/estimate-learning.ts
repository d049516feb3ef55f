import { ConfigError, LimiterUnavailableError } from './errors.ts';
import { llmqKey, type QueueNames } from './keys.ts';
import { loadLuaScripts, runLua } from './lua-scripts.ts';
import type { RedisClient } from './redis.ts';

/**
 * Estimates that learn: from every settle, the fleet learns per model how the provider's input
 * count compares with llmq's estimate (`estimateInputTokens`), in Redis, so every worker
 * reserves with what the provider will count rather than with a guess that may be twice it
 * (or, with a tokenizer that counts more, too little, and draws 429s).
 *
 * The ratio to reserve with is a high quantile of the decaying distribution of
 * provider / estimate, plus a margin, never below the largest of the latest ratios; until
 * `minSamples` settles it is never below 1 (today's estimate). See `lua/learnRatio-1.lua`.
 *
 * Where it plugs in: the settle path calls {@link EstimateLearning.record} with the call's
 * estimate and the provider's `usage.input_tokens` (+ cache creation); the acquire path reserves
 * `reserveFor(model, estimate)` input tokens instead of the estimate. A count from `count_tokens`
 * is exact and is neither scaled nor recorded.
 */
export interface EstimateLearningOptions {
  readonly redis: RedisClient;
  /** The learning's key shares the queue's hash tag. */
  readonly names: QueueNames;
  /** Observations after which an earlier one weighs half as much. @default 200 */
  readonly halfLife?: number;
  /** Quantile of the ratio reserved with, in (0, 1]. @default 0.99 */
  readonly quantile?: number;
  /** Share added to the quantile. @default 0.02 */
  readonly margin?: number;
  /** Settles before the learned ratio may go below 1. @default 20 */
  readonly minSamples?: number;
  /** The ratio never falls below the largest of this many latest ones. @default 20 */
  readonly recent?: number;
  /** The largest ratio reserved with, however the provider counts. @default 8 */
  readonly maxRatio?: number;
  /** How long a worker reuses a ratio it read before reading it again, ms. @default 1_000 */
  readonly cacheMs?: number;
  /** The clock of the cache (not of the learning, which counts settles). @default Date.now */
  readonly clock?: () => number;
}

/** What one model's learning holds now. */
export interface LearnedRatio {
  /** Settles recorded. */
  readonly observations: number;
  /** The ratio to reserve with (1 before anything was learned). */
  readonly ratio: number;
  /** The histogram's quantile, before the margin and the recent max; null before any. */
  readonly quantileRatio: number | null;
  /** The latest ratios, newest first. */
  readonly recent: readonly number[];
}

const SCRIPTS = loadLuaScripts(new URL('./lua', import.meta.url).pathname);
const MODEL = /^[^\s]{1,200}$/;

export class EstimateLearning {
  private readonly redis: RedisClient;
  private readonly names: QueueNames;
  private readonly args: readonly number[];
  private readonly cacheMs: number;
  private readonly clock: () => number;
  private readonly cache = new Map<string, { ratio: number; at: number }>();

  constructor(options: EstimateLearningOptions) {
    const o = {
      halfLife: 200,
      quantile: 0.99,
      margin: 0.02,
      minSamples: 20,
      recent: 20,
      maxRatio: 8,
      cacheMs: 1_000,
      ...options,
    };
    check('halfLife', o.halfLife, o.halfLife >= 1, 'a number of observations from 1 up');
    check('quantile', o.quantile, o.quantile > 0 && o.quantile <= 1, 'a share in (0, 1]');
    check('margin', o.margin, o.margin >= 0 && o.margin <= 1, 'a share from 0 to 1');
    check(
      'minSamples',
      o.minSamples,
      Number.isInteger(o.minSamples) && o.minSamples >= 0,
      'a whole number from 0 up',
    );
    check(
      'recent',
      o.recent,
      Number.isInteger(o.recent) && o.recent >= 1,
      'a whole number from 1 up',
    );
    check('maxRatio', o.maxRatio, o.maxRatio >= 1 && o.maxRatio <= 64, 'a number from 1 to 64');
    check('cacheMs', o.cacheMs, o.cacheMs >= 0, 'a number of ms from 0 up');
    this.redis = o.redis;
    this.names = o.names;
    this.args = [o.halfLife, o.quantile, o.margin, o.minSamples, o.recent, o.maxRatio];
    this.cacheMs = o.cacheMs;
    this.clock = o.clock ?? Date.now;
  }

  /** The key of a model's learning (`llmq:{jobs}:estimate:claude-…`). */
  keyOf(model: string): string {
    checkModel(model);
    return llmqKey(this.names, 'estimate', model);
  }

  /**
   * Records one settle: llmq estimated `estimate` input tokens, the provider counted `actual`.
   * Resolves with the model's ratio to reserve with from now on.
   *
   * @throws ConfigError on a bad count; LimiterUnavailableError when Redis cannot answer.
   */
  record(model: string, estimate: number, actual: number): Promise<number> {
    return this.recordMany(model, [{ estimate, actual }]);
  }

  /** {@link record} for several settles of one model, oldest first, in one command. */
  async recordMany(
    model: string,
    settles: readonly { readonly estimate: number; readonly actual: number }[],
  ): Promise<number> {
    const key = this.keyOf(model);
    for (const { estimate, actual } of settles) {
      if (!Number.isInteger(estimate) || estimate < 1)
        throw new ConfigError(
          `estimate must be a whole number of tokens from 1 up, got ${estimate}`,
        );
      if (!Number.isInteger(actual) || actual < 0)
        throw new ConfigError(
          `actual input tokens must be a whole number from 0 up, got ${actual}`,
        );
    }
    if (settles.length === 0) return this.ratio(model);
    const list = (f: (s: { estimate: number; actual: number }) => number) =>
      settles.map(f).join(',');
    const reply = await this.run(key, [
      list((s) => s.estimate),
      list((s) => s.actual),
      ...this.args,
    ]);
    const ratio = Number(reply);
    this.cache.set(model, { ratio, at: this.clock() });
    return ratio;
  }

  /** The model's ratio to reserve with: 1 until something is learned; cached for `cacheMs`. */
  async ratio(model: string): Promise<number> {
    const cached = this.cache.get(model);
    if (cached && this.clock() - cached.at < this.cacheMs) return cached.ratio;
    const stored = await this.redis.hget(this.keyOf(model), 'ratio').catch((err: Error) => {
      throw new LimiterUnavailableError(err.message, { cause: err });
    });
    const ratio = stored === null ? 1 : Number(stored);
    this.cache.set(model, { ratio, at: this.clock() });
    return ratio;
  }

  /** The ratio last read or learned here, however old (1 before any): no Redis round trip. */
  cachedRatio(model: string): number {
    return this.cache.get(model)?.ratio ?? 1;
  }

  /** Input tokens to reserve for an estimate: `ceil(estimate × ratio)`. */
  async reserveFor(model: string, estimate: number): Promise<number> {
    return Math.ceil(estimate * (await this.ratio(model)) - 1e-9);
  }

  /** What the model's learning holds (for status pages and tests). */
  async learned(model: string): Promise<LearnedRatio> {
    const [n, ratio, q, recent] = await this.redis.hmget(
      this.keyOf(model),
      'n',
      'ratio',
      'q',
      'recent',
    );
    return {
      observations: Number(n ?? 0),
      ratio: ratio === null ? 1 : Number(ratio),
      quantileRatio: q === null ? null : Number(q),
      recent: recent ? recent.split(',').map(Number) : [],
    };
  }

  /** Forgets what was learned of a model (its next settles start cold). */
  async forget(model: string): Promise<void> {
    this.cache.delete(model);
    await this.redis.del(this.keyOf(model));
  }

  private async run(key: string, args: readonly (number | string)[]): Promise<unknown> {
    try {
      return await runLua(this.redis, SCRIPTS['learnRatio']!, [key], args);
    } catch (err) {
      throw new LimiterUnavailableError((err as Error).message, { cause: err });
    }
  }
}

function check(name: string, value: number, ok: boolean, allowed: string): void {
  if (!Number.isFinite(value) || !ok)
    throw new ConfigError(`EstimateLearning ${name} must be ${allowed}, got ${value}`);
}

function checkModel(model: string): void {
  if (typeof model !== 'string' || !MODEL.test(model))
    throw new ConfigError(
      `model must be a model name of 1 to 200 characters without spaces, got ${JSON.stringify(model)}`,
    );
}
