/**
 * What calls cost, in US dollars per million tokens: the table shipped in prices.json for
 * current models, which a config's `prices` overrides or extends. Money is counted in whole
 * micro-dollars so sums settle exactly. Message Batches are billed at half the price.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { MODEL_PATTERN, matchModel } from './models.ts';

/**
 * Dollars per million tokens of one model class.
 * @inline
 */
export interface ModelPrice {
  /** Dollars per million input tokens. */
  readonly input: number;
  /** Dollars per million output tokens. */
  readonly output: number;
  /** Dollars per million tokens written to the prompt cache. @default input × 1.25 */
  readonly cacheWrite?: number | undefined;
  /** Dollars per million tokens read from the prompt cache. @default input × 0.1 */
  readonly cacheRead?: number | undefined;
}

const price = z.number().finite().min(0);
/** A price table by model pattern (a name, or a prefix ending in `*`). */
export const pricesSchema = z.record(
  z.string().regex(MODEL_PATTERN),
  z.strictObject({
    input: price,
    output: price,
    cacheWrite: price.optional(),
    cacheRead: price.optional(),
  }),
);

/** The shipped list prices (prices.json, next to this module in the source and in dist/). */
export const PRICES: Readonly<Record<string, ModelPrice>> = pricesSchema.parse(
  JSON.parse(readFileSync(new URL('./prices.json', import.meta.url), 'utf8')),
);

/** The share of the list price a Message Batches request costs. */
export const BATCH_PRICE_SHARE = 0.5;

/** A call's usage as the provider reports it. */
export interface PricedUsage {
  readonly input_tokens: number;
  readonly output_tokens: number;
  readonly cache_creation_input_tokens?: number | null | undefined;
  readonly cache_read_input_tokens?: number | null | undefined;
}

/** The shipped table with `overrides` on top. */
export function priceTable(
  overrides: Readonly<Record<string, ModelPrice>> = {},
): Readonly<Record<string, ModelPrice>> {
  return { ...PRICES, ...overrides };
}

/** The price of a model (exact name, else the longest matching prefix), or undefined. */
export function priceOf(model: string, table = PRICES): ModelPrice | undefined {
  const key = matchModel(Object.keys(table), model);
  return key === undefined ? undefined : table[key];
}

/** Whole micro-dollars per token is dollars per million tokens: the cost of a usage, in µ$. */
export function costMicros(p: ModelPrice, usage: PricedUsage): number {
  const write = usage.cache_creation_input_tokens ?? 0;
  const read = usage.cache_read_input_tokens ?? 0;
  return Math.ceil(
    usage.input_tokens * p.input +
      usage.output_tokens * p.output +
      write * (p.cacheWrite ?? p.input * 1.25) +
      read * (p.cacheRead ?? p.input * 0.1),
  );
}

/** The list price of a call's usage in dollars (0 for a model the table does not know). */
export function listPriceUsd(model: string, usage: PricedUsage, table = PRICES): number {
  const p = priceOf(model, table);
  return p ? costMicros(p, usage) / 1e6 : 0;
}

/** What running a call's usage through Message Batches saved, in dollars. */
export function batchSavingUsd(model: string, usage: PricedUsage): number {
  return listPriceUsd(model, usage) * (1 - BATCH_PRICE_SHARE);
}

/** `$0.0123` with enough digits to show small amounts. */
export function formatUsd(usd: number): string {
  return `$${usd >= 100 ? usd.toFixed(0) : usd >= 1 ? usd.toFixed(2) : usd.toFixed(4)}`;
}
