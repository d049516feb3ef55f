/** The zod schemas of the settings' values (see `config.ts`), shared by several settings. */
import { z } from 'zod';
import { durationMs } from './duration.ts';
import { MAX_RETRY_FOR_MS } from './job.ts';
import { MODEL_PATTERN } from './models.ts';
import { parseSize } from './size.ts';

export const wholeAtLeast = (min: number) =>
  z.coerce.number().refine((n) => Number.isInteger(n) && n >= min);
export const optionalLimit = wholeAtLeast(1).optional();
export const name = z.string().regex(/^[A-Za-z0-9_.-]{1,100}$/);

export const scopeLimits = z.strictObject({
  weight: z.coerce.number().finite().positive().optional(),
  rpm: wholeAtLeast(1).optional(),
  tpm: wholeAtLeast(1).optional(),
  itpm: wholeAtLeast(1).optional(),
  otpm: wholeAtLeast(1).optional(),
});
/** JSON given as a string (an env variable) is parsed first. */
export const jsonOf = (schema: z.ZodType) =>
  z.preprocess((v) => {
    if (typeof v !== 'string') return v;
    try {
      return JSON.parse(v);
    } catch {
      return v;
    }
  }, schema);
/** A duration with a unit (`10m`), or a number of ms from a config file. */
export const retryForSchema = z
  .union([z.number(), z.string()])
  .transform((v) => (typeof v === 'number' ? v : (durationMs(v) ?? Number.NaN)))
  .refine((n) => Number.isInteger(n) && n >= 0 && n <= MAX_RETRY_FOR_MS);
/** A duration (`30s`, `2m`) or ms, from `min` to `max`. */
export const durationSchema = (min: number, max: number) =>
  z
    .union([z.number(), z.string()])
    .transform((v) => (typeof v === 'number' ? v : (durationMs(v) ?? Number.NaN)))
    .refine((n) => Number.isInteger(n) && n >= min && n <= max);
/** A size (`32mb`) or a number of bytes, at least `min`. */
export const sizeSchema = (min: number) =>
  z
    .union([z.number(), z.string()])
    .transform((v) => parseSize(v) ?? Number.NaN)
    .refine((n) => Number.isSafeInteger(n) && n >= min);
export const scopesSchema = jsonOf(z.record(z.string().regex(/^[^|,\s]{1,200}$/), scopeLimits));
export const modelsSchema = jsonOf(z.record(z.string().regex(MODEL_PATTERN), scopeLimits));
