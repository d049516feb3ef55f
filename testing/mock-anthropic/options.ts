/**
 * Options of the mock server: the documented options type and the parser (shared by
 * `startMockAnthropic`, the `mock-anthropic` command and tests) that fills in defaults and turns
 * a bad value into a ConfigError naming the option (or flag) and the value.
 */

import type { z } from 'zod';
import type { FaultRates } from './faults.ts';
import { type OptionLabels, toConfigError } from './options-errors.ts';
import { faultRatesSchema, mockAnthropicOptionsSchema } from './options-schema.ts';
import type { OutputShare } from './output.ts';
import type { Algorithm, Limits, OutputAccounting } from './rate-limits.ts';
import { type InputCounting, MESSAGE_OVERHEAD_TOKENS } from './tokenizer.ts';

/**
 * How the mock behaves: its limits and window, latency, how much of `max_tokens` it answers,
 * faults, and how it counts input. Every option has a default.
 *
 * @example
 * ```ts
 * const options: MockAnthropicOptions = {
 *   limits: { inputTokens: 40_000, outputTokens: 8_000 },
 *   windowMs: 10_000,
 *   latencyMs: 50,
 *   faults: { overloaded: 0.05 },
 * };
 * ```
 */

export interface MockAnthropicOptions {
  /** Interface to bind. @default '127.0.0.1' */
  readonly host?: string;
  /** Port to listen on; 0 picks a free one (read it from the handle's `url`). @default 0 */
  readonly port?: number;
  /** Length of the rate-limit window in ms (the real API's is a minute). @default 60_000 */
  readonly windowMs?: number;
  /**
   * Limits per window; each is optional and an absent one is unlimited.
   * `tokens` limits input + output together.
   * @default {} (nothing limited)
   * @example { requests: 50, inputTokens: 40_000, outputTokens: 8_000 }
   */
  readonly limits?: {
    readonly requests?: number;
    readonly inputTokens?: number;
    readonly outputTokens?: number;
    readonly tokens?: number;
  };
  /**
   * Limits of model classes, by model name prefix (`claude-sonnet-`): a model that starts with
   * a prefix (the longest that matches) is limited by its own limiter instead of `limits`.
   * @default {}
   */
  readonly modelLimits?: Readonly<Record<string, NonNullable<MockAnthropicOptions['limits']>>>;
  /**
   * `sliding`: exact sliding-window log (never more than the limit in any window).
   * `bucket`: token bucket refilled continuously, as the real API documents.
   * @default 'sliding'
   */
  readonly algorithm?: Algorithm;
  /**
   * `reserve`: `max_tokens` is charged as output at admission and stays charged.
   * `actual`: `max_tokens` is charged at admission, and the unused part is given back when the
   * response ends (successfully or not).
   * `produced`: nothing of the output is charged at admission (an exhausted output budget still
   * refuses), and the output is charged as it is produced: the API's current documentation.
   * @default 'reserve'
   */
  readonly outputAccounting?: OutputAccounting;
  /**
   * Count input tokens as `ceil(characters / charsPerToken)` plus `perMessageTokens` a message,
   * in `/v1/messages` (usage and limits) and `count_tokens` alike: a provider whose counter
   * differs from llmq's estimate. Absent: the mock's tokenizer (see tokenizer.ts).
   * @default undefined
   * @example 3.6
   */
  readonly charsPerToken?: number;
  /** Tokens a message costs on top of its text when `charsPerToken` is set. @default 3 */
  readonly perMessageTokens?: number;
  /** Latency before the response (streaming: before the first delta), ms. @default 0 */
  readonly latencyMs?: number;
  /** Extra latency per output token, ms (streaming: spread over the deltas). @default 0 */
  readonly latencyPerOutputTokenMs?: number;
  /**
   * Share of `max_tokens` produced: a fixed share in [0, 1], or `[lo, hi]` to pick one per request,
   * deterministically from the request body. Output is `max(1, round(share * max_tokens))` tokens.
   * @default [0.3, 0.9]
   */
  readonly outputShare?: OutputShare;
  /**
   * Fault rates in [0, 1] (absent = 0): `overloaded` (529), `serverError` (500), `drop` (the
   * socket closed unanswered), `hang` (read and never answered, the connection left open);
   * for an admitted stream, `midStreamError` (an `error` event after some deltas) and `stall`
   * (silence after some deltas, the connection left open). `overloaded` + `serverError` +
   * `drop` + `hang` must be at most 1, and so must `midStreamError` + `stall`.
   * @default all 0
   */
  readonly faults?: Partial<FaultRates>;
  /** `x-api-key` values that get the spend-cap 429 (no retry-after). @default [] */
  readonly spendCappedKeys?: readonly string[];
  /** Seed of the fault generator. @default 1 */
  readonly seed?: number;
  /**
   * Token `-remaining` headers (tokens, input-tokens, output-tokens) rounded to the nearest
   * multiple of this, as the real API rounds them to the nearest thousand; `requests-remaining`
   * stays exact. 0 sends them exact.
   * @default 0
   * @example 1000
   */
  readonly roundReadings?: number;
  /**
   * The most `max_tokens` a request may ask for: above it the answer is the API's 400 (`max_tokens:
   * N > M, which is the maximum allowed number of output tokens for MODEL`). Also bounds what
   * the mock generates. At most 1,000,000.
   * @default 64_000
   */
  readonly maxOutputTokens?: number;
  /**
   * How long a prompt-cache entry lives after its last use, ms: a `cache_control` of
   * `{"type":"ephemeral"}` lives this long, one with `"ttl": "1h"` twelve times as long
   * (the API's 5 minutes and 1 hour).
   * @default 300_000
   */
  readonly cacheTtlMs?: number;
}

/** Options with every default filled in. */
export interface ResolvedMockAnthropicOptions {
  readonly host: string;
  readonly port: number;
  readonly windowMs: number;
  readonly limits: Limits;
  /** Limits by model name prefix. */
  readonly modelLimits: Readonly<Record<string, Limits>>;
  readonly algorithm: Algorithm;
  readonly outputAccounting: OutputAccounting;
  readonly inputCounting: InputCounting;
  readonly latencyMs: number;
  readonly latencyPerOutputTokenMs: number;
  readonly outputShare: OutputShare;
  readonly faults: FaultRates;
  readonly spendCappedKeys: readonly string[];
  readonly seed: number;
  readonly roundReadings: number;
  readonly maxOutputTokens: number;
  readonly cacheTtlMs: number;
}

/** The schema of {@link MockAnthropicOptions}, checked against the documented type. */
const optionsSchema: z.ZodType<MockAnthropicOptions> = mockAnthropicOptionsSchema;

/** Limits named as in the options to the limiter's dimensions. */
function toLimits(l: MockAnthropicOptions['limits']): Limits {
  const limits: Limits = {};
  if (l?.requests !== undefined) limits.requests = l.requests;
  if (l?.inputTokens !== undefined) limits.input_tokens = l.inputTokens;
  if (l?.outputTokens !== undefined) limits.output_tokens = l.outputTokens;
  if (l?.tokens !== undefined) limits.tokens = l.tokens;
  return limits;
}

/**
 * Validates `input` as {@link MockAnthropicOptions} and fills in the defaults.
 *
 * @throws ConfigError naming the option (or its label), what is allowed and the bad value.
 */
export function parseMockAnthropicOptions(
  input: unknown = {},
  labels: OptionLabels = {},
): ResolvedMockAnthropicOptions {
  const parsed = optionsSchema.safeParse(input);
  if (!parsed.success) throw toConfigError(parsed.error.issues, input, labels);
  const o = parsed.data;
  const limits = toLimits(o.limits);
  const modelLimits = Object.fromEntries(
    Object.entries(o.modelLimits ?? {}).map(([prefix, l]) => [prefix, toLimits(l)]),
  );
  return {
    host: o.host ?? '127.0.0.1',
    port: o.port ?? 0,
    windowMs: o.windowMs ?? 60_000,
    limits,
    modelLimits,
    algorithm: o.algorithm ?? 'sliding',
    outputAccounting: o.outputAccounting ?? 'reserve',
    inputCounting:
      o.charsPerToken === undefined
        ? {}
        : {
            charsPerToken: o.charsPerToken,
            perMessageTokens: o.perMessageTokens ?? MESSAGE_OVERHEAD_TOKENS,
          },
    latencyMs: o.latencyMs ?? 0,
    latencyPerOutputTokenMs: o.latencyPerOutputTokenMs ?? 0,
    outputShare: o.outputShare ?? [0.3, 0.9],
    faults: resolveFaults(o.faults),
    spendCappedKeys: o.spendCappedKeys ?? [],
    seed: o.seed ?? 1,
    roundReadings: o.roundReadings ?? 0,
    maxOutputTokens: o.maxOutputTokens ?? 64_000,
    cacheTtlMs: o.cacheTtlMs ?? 300_000,
  };
}

/** Fault rates with absent ones at 0. */
export function resolveFaults(faults: Partial<FaultRates> | undefined): FaultRates {
  return {
    overloaded: faults?.overloaded ?? 0,
    serverError: faults?.serverError ?? 0,
    drop: faults?.drop ?? 0,
    hang: faults?.hang ?? 0,
    midStreamError: faults?.midStreamError ?? 0,
    stall: faults?.stall ?? 0,
  };
}

export type { OptionLabel, OptionLabels } from './options-errors.ts';
export { faultRatesSchema, mockAnthropicOptionsSchema };
