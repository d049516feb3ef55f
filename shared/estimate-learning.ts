import { ConfigError, LimiterUnavailableError } from './errors.ts';
import {
  type BandRatio,
  type BandRatios,
  bandEnd,
  bandOf,
  reserveRatio,
} from './estimate-bands.ts';
import { llmqKey, type QueueNames } from './keys.ts';
import { loadLuaScripts, packLuaArg, runLua } from './lua-scripts.ts';
import type { RedisClient } from './redis.ts';

/**
 * Estimates that learn: from every settle, the fleet learns per model and per size band of the
 * estimate (`estimate-bands.ts`) how the provider's input count compares with llmq's estimate
 * (`estimateInputTokens`), in Redis, so every worker reserves with what the provider will count
 * rather than with a guess that may be twice it (or, with a tokenizer that counts more, too
 * little, and draws 429s).
 *
 * A warm band (`minSamples` settles) reserves with a high quantile of the decaying distribution
 * of provider / estimate, plus a margin, never below the largest of its latest ratios. A cold
 * band never extrapolates: between two warm bands it takes the larger of theirs, otherwise the
 * estimate as is (see `reserveRatio`, `lua/learnBands-2.lua`).
 *
 * Where it plugs in: the settle path calls {@link EstimateLearning.record} with the call's
 * estimate and the provider's `usage.input_tokens` (+ cache creation); the acquire path reserves
 * `reserveFor(model, estimate)` input tokens instead of the estimate. A count from `count_tokens`
 * is exact and is neither scaled nor recorded.
 * @inline
 */
export interface EstimateLearningOptions {
  readonly redis: RedisClient;
  /** The learning's keys share the queue's hash tag. */
  readonly names: QueueNames;
  /** Observations of a band after which an earlier one weighs half as much. @default 200 */
  readonly halfLife?: number;
  /** Quantile of the ratio reserved with, in (0, 1]. @default 0.99 */
  readonly quantile?: number;
  /** Share added to the quantile. @default 0.02 */
  readonly margin?: number;
  /**
   * Settles of a band before its own ratio is reserved with (the band is warm). A band spans
   * at most ×1.5 of estimates, so its ratios spread little, and a band of few settles reserves
   * 2% over the largest of them (the quantile's bucket edge, plus the margin): 4 are enough. More leave the
   * dozen bands of a mixed workload cold past its first 50 calls (split's mix, the provider
   * counting half: 92% of the reservation counted with 4, 81% with 8). @default 4
   */
  readonly minSamples?: number;
  /** A band's ratio never falls below the largest of this many latest ones. @default 20 */
  readonly recent?: number;
  /** The largest ratio reserved with, however the provider counts. @default 8 */
  readonly maxRatio?: number;
  /** How long a worker reuses the ratios it read before reading them again, ms. @default 1_000 */
  readonly cacheMs?: number;
  /** The clock of the cache (not of the learning, which counts settles). @default Date.now */
  readonly clock?: () => number;
}

/** What one band of a model's learning holds now. */
export interface LearnedBand {
  /** The band's first and last estimate. */
  readonly from: number;
  readonly to: number;
  /** Settles recorded in the band. */
  readonly observations: number;
  /** Its own ratio is reserved with (at least `minSamples` settles). */
  readonly warm: boolean;
  /** The ratio an estimate of the band is reserved with now. */
  readonly ratio: number;
  /** The histogram's quantile, before the margin and the recent max. */
  readonly quantileRatio: number;
  /** The latest ratios, newest first. */
  readonly recent: readonly number[];
}

/** What one model's learning holds now. */
export interface LearnedRatios {
  /** Settles recorded, in every band. */
  readonly observations: number;
  /** The bands that saw a settle, smallest first. */
  readonly bands: readonly LearnedBand[];
}

/** One settle: llmq estimated `estimate` input tokens, the provider counted `actual`. */
export interface Settle {
  readonly estimate: number;
  readonly actual: number;
}

const SCRIPTS = loadLuaScripts(new URL('./lua', import.meta.url).pathname);
const MODEL = /^[^\s]{1,200}$/;

export class EstimateLearning {
  private readonly redis: RedisClient;
  private readonly names: QueueNames;
  private readonly options: Readonly<Record<string, number>>;
  private readonly cacheMs: number;
  private readonly clock: () => number;
  private readonly cache = new Map<string, { bands: BandRatios; at: number }>();

  constructor(options: EstimateLearningOptions) {
    const o = {
      halfLife: 200,
      quantile: 0.99,
      margin: 0.02,
      minSamples: 4,
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
    const { halfLife, quantile, margin, minSamples, recent, maxRatio } = o;
    this.options = { halfLife, quantile, margin, minSamples, recent, maxRatio };
    this.cacheMs = o.cacheMs;
    this.clock = o.clock ?? Date.now;
  }

  /**
   * The key of a model's learning, every band's histogram (`llmq:{jobs}:estimate-bands:…`). The
   * one ratio per model of releases before bands (`…:estimate:…`) is not read.
   */
  keyOf(model: string): string {
    checkModel(model);
    return llmqKey(this.names, 'estimate-bands', model);
  }

  /** The key of a model's band ratios, what the gate reads (`llmq:{jobs}:estimate-ratios:…`). */
  ratiosKeyOf(model: string): string {
    checkModel(model);
    return llmqKey(this.names, 'estimate-ratios', model);
  }

  /**
   * Records one settle. Resolves with the ratio an estimate of its band is reserved with from
   * now on.
   *
   * @throws ConfigError on a bad count; LimiterUnavailableError when Redis cannot answer.
   */
  async record(model: string, estimate: number, actual: number): Promise<number> {
    return reserveRatio(await this.recordMany(model, [{ estimate, actual }]), bandOf(estimate));
  }

  /**
   * {@link record} for several settles of one model, oldest first, in one command. Resolves
   * with the model's bands.
   */
  async recordMany(model: string, settles: readonly Settle[]): Promise<BandRatios> {
    const keys = [this.keyOf(model), this.ratiosKeyOf(model)];
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
    if (settles.length === 0) return this.bands(model);
    const arg = packLuaArg({
      ...this.options,
      settles: settles.map((s) => [bandOf(s.estimate), s.estimate, s.actual]),
    });
    let reply: unknown;
    try {
      reply = await runLua(this.redis, SCRIPTS['learnBands']!, keys, [arg]);
    } catch (err) {
      throw new LimiterUnavailableError((err as Error).message, { cause: err });
    }
    const bands = parseRatios(pairs(reply as string[]));
    this.cache.set(model, { bands, at: this.clock() });
    return bands;
  }

  /** The model's bands as the gate reads them (one HGETALL); cached for `cacheMs`. */
  async bands(model: string): Promise<BandRatios> {
    const cached = this.cache.get(model);
    if (cached && this.clock() - cached.at < this.cacheMs) return cached.bands;
    const stored = await this.redis.hgetall(this.ratiosKeyOf(model)).catch((err: Error) => {
      throw new LimiterUnavailableError(err.message, { cause: err });
    });
    const bands = parseRatios(Object.entries(stored));
    this.cache.set(model, { bands, at: this.clock() });
    return bands;
  }

  /** The ratio to reserve an estimate with: 1 until its band learned; cached for `cacheMs`. */
  async ratio(model: string, estimate: number): Promise<number> {
    return reserveRatio(await this.bands(model), bandOf(estimate));
  }

  /** The ratio from the bands last read or learned here, however old (1 before any). */
  cachedRatio(model: string, estimate: number): number {
    const cached = this.cache.get(model);
    return cached ? reserveRatio(cached.bands, bandOf(estimate)) : 1;
  }

  /** Input tokens to reserve for an estimate: `ceil(estimate × ratio)`. */
  async reserveFor(model: string, estimate: number): Promise<number> {
    return Math.ceil(estimate * (await this.ratio(model, estimate)) - 1e-9);
  }

  /** What the model's learning holds, band by band (for status pages and tests). */
  async learned(model: string): Promise<LearnedRatios> {
    const [learn, ratios] = await Promise.all([
      this.redis.hgetall(this.keyOf(model)),
      this.redis.hgetall(this.ratiosKeyOf(model)),
    ]);
    const bands = parseRatios(Object.entries(ratios));
    const out = [...bands.keys()]
      .sort((a, b) => a - b)
      .map((from): LearnedBand => {
        const l = JSON.parse(learn[String(from)] ?? '{}') as { q?: number; recent?: number[] };
        const b = bands.get(from)!;
        return {
          from,
          to: bandEnd(from),
          observations: b.observations,
          warm: b.warm,
          ratio: reserveRatio(bands, from),
          quantileRatio: l.q ?? b.ratio,
          recent: Array.isArray(l.recent) ? l.recent : [],
        };
      });
    return { observations: out.reduce((n, b) => n + b.observations, 0), bands: out };
  }

  /** Forgets what was learned of a model (its next settles start cold). */
  async forget(model: string): Promise<void> {
    this.cache.delete(model);
    await this.redis.del(this.keyOf(model), this.ratiosKeyOf(model));
  }
}

/** HGETALL's flat reply as field / value pairs. */
function pairs(flat: readonly string[]): [string, string][] {
  const out: [string, string][] = [];
  for (let i = 0; i + 1 < flat.length; i += 2) out.push([flat[i]!, flat[i + 1]!]);
  return out;
}

/** The ratios hash (`<band>` → `{ratio, warm, n}`) as bands. */
function parseRatios(entries: readonly [string, string][]): BandRatios {
  const bands = new Map<number, BandRatio>();
  for (const [field, value] of entries) {
    const v = JSON.parse(value) as { ratio: number; warm: boolean; n: number };
    bands.set(Number(field), { ratio: v.ratio, warm: v.warm, observations: v.n });
  }
  return bands;
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
