/**
 * The mutable state behind one mock server: the limiter, the prompt cache, the stats, the fault
 * generator and the options that may change at runtime. `reset()` swaps in fresh ones; a response still in flight
 * from before the reset carries the old generation and its refund is dropped, so it cannot corrupt
 * the new state.
 */

import { ConfigError } from '../../shared/errors.ts';
import { BatchStore } from './batches.ts';
import { createFaultInjector, type FaultInjector } from './faults.ts';
import {
  type MockAnthropicOptions,
  parseMockAnthropicOptions,
  type ResolvedMockAnthropicOptions,
  resolveFaults,
} from './options.ts';
import type { OutputShare } from './output.ts';
import { PromptCache } from './prompt-cache.ts';
import { createRateLimiter, type RateLimiter } from './rate-limits.ts';
import { createStatsRecorder, type StatsRecorder } from './stats.ts';

/**
 * The options `setOptions` may change while the server runs.
 * @inline
 */
export type RuntimeOptions = Partial<
  Pick<
    MockAnthropicOptions,
    'latencyMs' | 'latencyPerOutputTokenMs' | 'outputShare' | 'spendCappedKeys'
  >
>;

export class MockState {
  readonly options: ResolvedMockAnthropicOptions;
  latencyMs: number;
  latencyPerOutputTokenMs: number;
  outputShare: OutputShare;
  spendCappedKeys: ReadonlySet<string>;
  limiter!: RateLimiter;
  /** A limiter per model name prefix of `modelLimits`. */
  modelLimiters = new Map<string, RateLimiter>();
  stats: StatsRecorder;
  /** Prompt-cache entries of every key. */
  promptCache: PromptCache;
  readonly faults: FaultInjector;
  /** Message Batches: kept across `reset()` only in their options. */
  readonly batches: BatchStore;
  /** Bumped by reset(); admissions remember it so stale refunds are ignored. */
  generation = 0;

  constructor(options: ResolvedMockAnthropicOptions) {
    this.options = options;
    this.latencyMs = options.latencyMs;
    this.latencyPerOutputTokenMs = options.latencyPerOutputTokenMs;
    this.outputShare = options.outputShare;
    this.spendCappedKeys = new Set(options.spendCappedKeys);
    this.newLimiters();
    this.stats = this.newStats();
    this.promptCache = new PromptCache(options.cacheTtlMs);
    this.faults = createFaultInjector(options.seed, options.faults);
    this.batches = new BatchStore(this);
  }

  /** Clears stats, limit state and the prompt cache, and restarts the fault generator. */
  reset(): void {
    this.generation++;
    this.newLimiters();
    this.stats = this.newStats();
    this.promptCache = new PromptCache(this.options.cacheTtlMs);
    this.faults.reset();
    this.batches.reset();
  }

  /** Replaces the fault rates (absent rates become 0). @throws ConfigError on a bad rate. */
  setFaults(faults: MockAnthropicOptions['faults']): void {
    const parsed = parseMockAnthropicOptions({ faults: faults ?? {} });
    this.faults.setRates(resolveFaults(parsed.faults));
  }

  /** Changes latency, output share or spend-capped keys. @throws ConfigError on a bad value. */
  setOptions(options: RuntimeOptions): void {
    const allowed = new Set([
      'latencyMs',
      'latencyPerOutputTokenMs',
      'outputShare',
      'spendCappedKeys',
    ]);
    const other = Object.keys(options ?? {}).find((key) => !allowed.has(key));
    if (other !== undefined) {
      throw new ConfigError(
        `setOptions cannot change "${other}" on a running mock: allowed are ${[...allowed].join(', ')}`,
      );
    }
    const parsed = parseMockAnthropicOptions(options);
    if (options.latencyMs !== undefined) this.latencyMs = parsed.latencyMs;
    if (options.latencyPerOutputTokenMs !== undefined) {
      this.latencyPerOutputTokenMs = parsed.latencyPerOutputTokenMs;
    }
    if (options.outputShare !== undefined) this.outputShare = parsed.outputShare;
    if (options.spendCappedKeys !== undefined)
      this.spendCappedKeys = new Set(parsed.spendCappedKeys);
  }

  /** The limiter of a model: that of the longest prefix of `modelLimits` it starts with, else the global one. */
  limiterFor(model: string): RateLimiter {
    let best: string | undefined;
    for (const prefix of this.modelLimiters.keys()) {
      if (model.startsWith(prefix) && (best === undefined || prefix.length > best.length))
        best = prefix;
    }
    return best === undefined ? this.limiter : this.modelLimiters.get(best)!;
  }

  private newLimiters(): void {
    const { algorithm, limits, modelLimits, windowMs } = this.options;
    this.limiter = createRateLimiter(algorithm, limits, windowMs);
    this.modelLimiters = new Map(
      Object.entries(modelLimits).map(([p, l]) => [p, createRateLimiter(algorithm, l, windowMs)]),
    );
  }

  private newStats(): StatsRecorder {
    const { algorithm, limits, windowMs, outputAccounting } = this.options;
    return createStatsRecorder({ algorithm, limits, windowMs, outputAccounting });
  }
}
