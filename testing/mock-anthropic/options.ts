/**
 * Options of the mock server: the documented options type, its zod schema (shared by
 * `startMockAnthropic`, the `mock-anthropic` command and tests), and the parser that fills in
 * defaults and turns a bad value into a ConfigError naming the option (or flag) and the value.
 */

import { z } from 'zod';
import { ConfigError } from '../../shared/errors.ts';
import type { FaultRates } from './faults.ts';
import type { OutputShare } from './output.ts';
import type { Algorithm, Limits } from './rate-limits.ts';
import { type InputCounting, MESSAGE_OVERHEAD_TOKENS } from './tokenizer.ts';

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
   * @default 'reserve'
   */
  readonly outputAccounting?: 'reserve' | 'actual';
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
   * Fault rates in [0, 1] (absent = 0). `overloaded` + `serverError` + `drop` must be at most 1.
   * @default all 0
   */
  readonly faults?: Partial<FaultRates>;
  /** `x-api-key` values that get the spend-cap 429 (no retry-after). @default [] */
  readonly spendCappedKeys?: readonly string[];
  /** Seed of the fault generator. @default 1 */
  readonly seed?: number;
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
  readonly outputAccounting: 'reserve' | 'actual';
  readonly inputCounting: InputCounting;
  readonly latencyMs: number;
  readonly latencyPerOutputTokenMs: number;
  readonly outputShare: OutputShare;
  readonly faults: FaultRates;
  readonly spendCappedKeys: readonly string[];
  readonly seed: number;
}

const positiveInteger = () =>
  z
    .int({ error: 'a positive integer' })
    .min(1, { error: 'a positive integer' })
    .max(Number.MAX_SAFE_INTEGER, { error: 'a positive integer' });
const nonNegative = () =>
  z
    .number({ error: 'a number >= 0' })
    .min(0, { error: 'a number >= 0' })
    .max(86_400_000, { error: 'a number >= 0 (and at most a day)' });
const rate = () =>
  z
    .number({ error: 'a rate from 0 to 1' })
    .min(0, { error: 'a rate from 0 to 1' })
    .max(1, { error: 'a rate from 0 to 1' });
const SHARE = 'a share from 0 to 1, or a range [lo, hi] with 0 <= lo <= hi <= 1';

export const faultRatesSchema = z.strictObject({
  overloaded: rate().optional(),
  serverError: rate().optional(),
  drop: rate().optional(),
  midStreamError: rate().optional(),
});

const share = () => z.number({ error: SHARE }).min(0, { error: SHARE }).max(1, { error: SHARE });
const outputShareSchema = z.union(
  [
    share(),
    z.tuple([share(), share()], { error: SHARE }).refine(([lo, hi]) => lo <= hi, { error: SHARE }),
  ],
  { error: SHARE },
);

/** The schema of {@link MockAnthropicOptions} (unknown keys are refused: they are typos). */
const limitsSchema = z.strictObject({
  requests: positiveInteger().optional(),
  inputTokens: positiveInteger().optional(),
  outputTokens: positiveInteger().optional(),
  tokens: positiveInteger().optional(),
});

export const mockAnthropicOptionsSchema = z
  .strictObject(
    {
      host: z
        .string({ error: 'a host name or IP address' })
        .min(1, { error: 'a host name or IP address' })
        .optional(),
      port: z
        .int({ error: 'a port from 0 to 65535' })
        .min(0, { error: 'a port from 0 to 65535' })
        .max(65_535, { error: 'a port from 0 to 65535' })
        .optional(),
      windowMs: z
        .number({ error: 'a number of milliseconds >= 1' })
        .min(1, { error: 'a number of milliseconds >= 1' })
        .max(86_400_000, { error: 'a number of milliseconds up to a day' })
        .optional(),
      limits: limitsSchema.optional(),
      modelLimits: z.record(z.string().min(1), limitsSchema).optional(),
      algorithm: z.enum(['sliding', 'bucket'], { error: 'sliding or bucket' }).optional(),
      outputAccounting: z.enum(['reserve', 'actual'], { error: 'reserve or actual' }).optional(),
      charsPerToken: z
        .number({ error: 'a number of characters from 0.1 to 100' })
        .min(0.1, { error: 'a number of characters from 0.1 to 100' })
        .max(100, { error: 'a number of characters from 0.1 to 100' })
        .optional(),
      perMessageTokens: z
        .int({ error: 'a whole number of tokens from 0 to 1000' })
        .min(0, { error: 'a whole number of tokens from 0 to 1000' })
        .max(1000, { error: 'a whole number of tokens from 0 to 1000' })
        .optional(),
      latencyMs: nonNegative().optional(),
      latencyPerOutputTokenMs: nonNegative().optional(),
      outputShare: outputShareSchema.optional(),
      faults: faultRatesSchema.optional(),
      spendCappedKeys: z
        .array(z.string({ error: 'a list of API keys' }), { error: 'a list of API keys' })
        .optional(),
      seed: z.int({ error: 'an integer' }).optional(),
    },
    { error: 'an object' },
  )
  .check((ctx) => {
    if (ctx.value.perMessageTokens !== undefined && ctx.value.charsPerToken === undefined) {
      ctx.issues.push({
        code: 'custom',
        input: ctx.value.perMessageTokens,
        path: ['perMessageTokens'],
        message: 'given only with charsPerToken (the tokenizer has its own overheads)',
      });
    }
    const faults = ctx.value.faults;
    if (!faults) return;
    const front = (faults.overloaded ?? 0) + (faults.serverError ?? 0) + (faults.drop ?? 0);
    if (front > 1) {
      ctx.issues.push({
        code: 'custom',
        input: faults,
        path: ['faults'],
        message: 'rates whose sum (overloaded + serverError + drop) is at most 1',
      });
    }
  }) satisfies z.ZodType<MockAnthropicOptions>;

/**
 * How to name an option in an error: the command passes its flag names and the raw strings typed,
 * so the message reads `--algo must be sliding or bucket, got "fixed"`. Keys are dotted option
 * paths such as `limits.requests` or `algorithm`.
 */
export type OptionLabels = Readonly<Record<string, OptionLabel>>;

export interface OptionLabel {
  /** How the user named it, e.g. `--rpm`. */
  readonly name: string;
  /** The text the user typed, shown instead of the converted value. */
  readonly raw?: string;
  /** What is allowed, when the user's units differ from the option's (seconds vs ms). */
  readonly allowed?: string;
}

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
  const parsed = mockAnthropicOptionsSchema.safeParse(input);
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
  };
}

/** Fault rates with absent ones at 0. */
export function resolveFaults(faults: Partial<FaultRates> | undefined): FaultRates {
  return {
    overloaded: faults?.overloaded ?? 0,
    serverError: faults?.serverError ?? 0,
    drop: faults?.drop ?? 0,
    midStreamError: faults?.midStreamError ?? 0,
  };
}

function toConfigError(
  issues: readonly z.core.$ZodIssue[],
  input: unknown,
  labels: OptionLabels,
): ConfigError {
  const issue = issues[0];
  if (!issue) return new ConfigError('mock-anthropic options are invalid');
  if (issue.code === 'unrecognized_keys') {
    const where = issue.path.length > 0 ? `${issue.path.join('.')}.` : '';
    const known = Object.keys(knownKeys(issue.path)).join(', ');
    return new ConfigError(
      `unknown mock-anthropic option ${issue.keys.map((key) => `"${where}${key}"`).join(', ')}: ` +
        `allowed are ${known}`,
    );
  }
  // Name the option, not an element inside it (`outputShare`, not `outputShare.1`).
  const firstIndex = issue.path.findIndex((key) => typeof key === 'number');
  const optionPath = firstIndex >= 0 ? issue.path.slice(0, firstIndex) : issue.path;
  const path = optionPath.map(String).join('.');
  if (path === 'faults' && issue.code === 'custom') {
    const name = ['faults.overloaded', 'faults.serverError', 'faults.drop']
      .map((key) => labels[key]?.name ?? key)
      .join(' + ');
    const faults = (valueAt(input, ['faults']) ?? {}) as Record<string, unknown>;
    const sum = ['overloaded', 'serverError', 'drop'].reduce((total, key) => {
      const rate = faults[key];
      return total + (typeof rate === 'number' ? rate : 0);
    }, 0);
    return new ConfigError(`${name} must be at most 1, got ${Number(sum.toFixed(6))}`);
  }
  const label = labels[path];
  const name = label?.name ?? (path === '' ? 'mock-anthropic options' : path);
  const shown =
    label?.raw !== undefined ? JSON.stringify(label.raw) : show(valueAt(input, optionPath));
  return new ConfigError(`${name} must be ${label?.allowed ?? issue.message}, got ${shown}`);
}

function knownKeys(path: readonly PropertyKey[]): Record<string, unknown> {
  if (path[0] === 'limits') return { requests: 0, inputTokens: 0, outputTokens: 0, tokens: 0 };
  if (path[0] === 'faults') return faultRatesSchema.shape;
  return mockAnthropicOptionsSchema.shape;
}

function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let value = input;
  for (const key of path) {
    if (value === null || typeof value !== 'object') return undefined;
    value = (value as Record<PropertyKey, unknown>)[key];
  }
  return value;
}

function show(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (typeof value === 'number' && !Number.isFinite(value)) return String(value);
  return JSON.stringify(value) ?? String(value);
}
