/**
 * What the mock saw and charged, for tests and benchmarks to check a client against: how many
 * attempts, which statuses, which limits refused, what was spent, and the largest charge that
 * landed in any one window, computed from the server's own admission times.
 */

import type { FaultKind } from './faults.ts';
import type { CacheUse } from './prompt-cache.ts';
import {
  type Algorithm,
  type Charge,
  DIMENSIONS,
  type Dimension,
  type OutputAccounting,
  zeroCharge,
} from './rate-limits.ts';

/**
 * What the mock saw and charged (see the module's comment): `mock.stats()`.
 *
 * @example
 * ```ts
 * const { attempts, responses, rateLimited } = mock.stats();
 * ```
 * @inlineType FaultKind
 * @inlineType Dimension
 * @inlineType Charge
 */
export interface MockStats {
  windowMs: number;
  algorithm: Algorithm;
  outputAccounting: OutputAccounting;
  limits: { requests?: number; input_tokens?: number; output_tokens?: number; tokens?: number };
  /** Every `POST /v1/messages` received. */
  attempts: number;
  /** Requests that passed the limits (and were charged). */
  admitted: number;
  /**
   * Responses by HTTP status as a string (`"200"`, `"429"`); dropped connections as
   * `"dropped"`, requests left unanswered (the `hang` fault) as `"hung"`.
   */
  responses: Record<string, number>;
  /** 429s by the limit that refused. */
  rateLimited: Record<Dimension | 'spend_cap', number>;
  /** Totals actually charged (after refunds in 'actual' mode, output as produced in 'produced'). */
  spent: Charge;
  /**
   * Per dimension, the largest total charged to admissions that fall in one interval
   * [t, t + windowMs), from the server's admission times and final charges. With the sliding
   * algorithm it never exceeds the limit; a token bucket allows up to twice the limit (a full
   * bucket plus a window's refill).
   */
  worstWindow: Charge;
  /** `POST /v1/messages/count_tokens` calls received. */
  countTokensCalls: number;
  /** Injected faults by kind (a mid-stream error or stall also counts as a 200 in `responses`). */
  faults: Record<FaultKind, number>;
  /** First and last admission times, ms epoch. */
  firstAdmissionAt: number | null;
  lastAdmissionAt: number | null;
  /** The prompt cache: admitted calls that wrote to it and that read from it, and their tokens. */
  cache: CacheStats;
}

/**
 * What the mock's prompt cache did.
 * @inline
 */
export interface CacheStats {
  writes: number;
  reads: number;
  creationInputTokens: number;
  readInputTokens: number;
}

/** One admission as the stats keep it; refunds lower its charge. */
export interface AdmissionRecord {
  readonly at: number;
  readonly charge: Charge;
}

export interface StatsConfig {
  windowMs: number;
  algorithm: Algorithm;
  outputAccounting: OutputAccounting;
  limits: Partial<Record<Dimension, number>>;
}

export interface StatsRecorder {
  attempt(): void;
  response(status: number | 'dropped' | 'hung'): void;
  rateLimited(by: Dimension | 'spend_cap'): void;
  fault(kind: FaultKind): void;
  countTokensCall(): void;
  admit(at: number, charge: Charge): AdmissionRecord;
  /** What an admitted call wrote to and read from the prompt cache. */
  cache(use: CacheUse): void;
  refund(record: AdmissionRecord, amount: Partial<Charge>): void;
  /** Charges an admitted call what it produced since (`outputAccounting: 'produced'`). */
  produced(record: AdmissionRecord, amount: Partial<Charge>): void;
  snapshot(): MockStats;
}

/** A fresh recorder; the server makes a new one on reset. */
export function createStatsRecorder(config: StatsConfig): StatsRecorder {
  let attempts = 0;
  let countTokensCalls = 0;
  const responses: Record<string, number> = {};
  const rateLimited: Record<Dimension | 'spend_cap', number> = {
    ...zeroCharge(),
    spend_cap: 0,
  };
  const faults: Record<FaultKind, number> = {
    overloaded: 0,
    serverError: 0,
    drop: 0,
    hang: 0,
    midStreamError: 0,
    stall: 0,
  };
  const spent = zeroCharge();
  const cache: CacheStats = { writes: 0, reads: 0, creationInputTokens: 0, readInputTokens: 0 };
  // Kept whole for worstWindow: fine for tests and benches up to ~100k admissions.
  const log: AdmissionRecord[] = [];

  return {
    attempt() {
      attempts++;
    },
    response(status) {
      const key = String(status);
      responses[key] = (responses[key] ?? 0) + 1;
    },
    rateLimited(by) {
      rateLimited[by]++;
    },
    fault(kind) {
      faults[kind]++;
    },
    countTokensCall() {
      countTokensCalls++;
    },
    admit(at, charge) {
      const record: AdmissionRecord = { at, charge: { ...charge } };
      log.push(record);
      for (const dimension of DIMENSIONS) spent[dimension] += charge[dimension];
      return record;
    },
    cache(use) {
      if (use.creationTokens > 0) cache.writes++;
      if (use.readTokens > 0) cache.reads++;
      cache.creationInputTokens += use.creationTokens;
      cache.readInputTokens += use.readTokens;
    },
    refund(record, amount) {
      for (const dimension of DIMENSIONS) {
        const back = Math.min(Math.max(amount[dimension] ?? 0, 0), record.charge[dimension]);
        record.charge[dimension] -= back;
        spent[dimension] -= back;
      }
    },
    produced(record, amount) {
      for (const dimension of DIMENSIONS) {
        const more = Math.max(amount[dimension] ?? 0, 0);
        record.charge[dimension] += more;
        spent[dimension] += more;
      }
    },
    snapshot() {
      return {
        windowMs: config.windowMs,
        algorithm: config.algorithm,
        outputAccounting: config.outputAccounting,
        limits: { ...config.limits },
        attempts,
        admitted: log.length,
        responses: { ...responses },
        rateLimited: { ...rateLimited },
        spent: { ...spent },
        worstWindow: worstWindow(log, config.windowMs),
        countTokensCalls,
        faults: { ...faults },
        firstAdmissionAt: log[0]?.at ?? null,
        lastAdmissionAt: log.at(-1)?.at ?? null,
        cache: { ...cache },
      };
    },
  };
}

/**
 * For each dimension, the largest sum of charges over admissions with `at` in some [t, t + windowMs).
 * Two pointers over the admissions sorted by time; a window that starts at an admission is always
 * among the worst, so only those starts are tried.
 */
export function worstWindow(records: readonly AdmissionRecord[], windowMs: number): Charge {
  const sorted = isSorted(records) ? records : [...records].sort((a, b) => a.at - b.at);
  const worst = zeroCharge();
  for (const dimension of DIMENSIONS) {
    let sum = 0;
    let end = 0;
    for (let start = 0; start < sorted.length; start++) {
      const windowEnd = sorted[start]!.at + windowMs;
      while (end < sorted.length && sorted[end]!.at < windowEnd) {
        sum += sorted[end]!.charge[dimension];
        end++;
      }
      if (sum > worst[dimension]) worst[dimension] = sum;
      sum -= sorted[start]!.charge[dimension];
    }
  }
  return worst;
}

function isSorted(records: readonly AdmissionRecord[]): boolean {
  for (let i = 1; i < records.length; i++) {
    if (records[i]!.at < records[i - 1]!.at) return false;
  }
  return true;
}
