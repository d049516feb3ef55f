/**
 * The zod schema of the mock's options (unknown keys are refused: they are typos), with messages
 * that say what is allowed; options.ts documents each option and fills in the defaults.
 */

import { z } from 'zod';
import { FAULT_GROUPS } from './faults.ts';

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
/** What the mock generates at most for one answer (a few MB of text), whatever it is told. */
export const MOST_OUTPUT_TOKENS = 1_000_000;
const SHARE = 'a share from 0 to 1, or a range [lo, hi] with 0 <= lo <= hi <= 1';

export const faultRatesSchema = z.strictObject({
  overloaded: rate().optional(),
  serverError: rate().optional(),
  drop: rate().optional(),
  hang: rate().optional(),
  midStreamError: rate().optional(),
  stall: rate().optional(),
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
      outputAccounting: z
        .enum(['reserve', 'actual', 'produced'], { error: 'reserve, actual or produced' })
        .optional(),
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
      roundReadings: z
        .int({ error: 'a whole number of tokens >= 0 (0 for exact readings)' })
        .min(0, { error: 'a whole number of tokens >= 0 (0 for exact readings)' })
        .max(Number.MAX_SAFE_INTEGER, { error: 'a whole number of tokens >= 0' })
        .optional(),
      maxOutputTokens: z
        .int({ error: 'a whole number of tokens from 1 to 1000000' })
        .min(1, { error: 'a whole number of tokens from 1 to 1000000' })
        .max(MOST_OUTPUT_TOKENS, { error: 'a whole number of tokens from 1 to 1000000' })
        .optional(),
      cacheTtlMs: z
        .number({ error: 'a number of milliseconds from 1 to a day' })
        .min(1, { error: 'a number of milliseconds from 1 to a day' })
        .max(86_400_000, { error: 'a number of milliseconds from 1 to a day' })
        .optional(),
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
    // Rates drawn together share one draw: their sum is at most 1.
    FAULT_GROUPS.forEach((group, index) => {
      const sum = group.reduce((total, kind) => total + (faults[kind] ?? 0), 0);
      if (sum > 1)
        ctx.issues.push({
          code: 'custom',
          input: faults,
          path: ['faults'],
          params: { group: index },
          message: `rates whose sum (${group.join(' + ')}) is at most 1`,
        });
    });
  });
