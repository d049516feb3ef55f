/**
 * What calls cost, in US dollars per million tokens, and what Message Batches save (they are
 * billed at half the price). One small table, to be replaced by a configurable one.
 */

export interface ModelPrice {
  /** Dollars per million input tokens. */
  readonly input: number;
  /** Dollars per million output tokens. */
  readonly output: number;
}

/** List prices of current models (a model name matches the longest entry it starts with). */
export const PRICES: Readonly<Record<string, ModelPrice>> = {
  'claude-haiku-4-5': { input: 1, output: 5 },
  'claude-sonnet-4-5': { input: 3, output: 15 },
  'claude-opus-4-1': { input: 15, output: 75 },
};

/** The share of the list price a Message Batches request costs. */
export const BATCH_PRICE_SHARE = 0.5;

/** The price of a model, or undefined when the table does not know it. */
export function priceOf(model: string): ModelPrice | undefined {
  const key = Object.keys(PRICES)
    .filter((k) => model === k || model.startsWith(`${k}-`))
    .sort((a, b) => b.length - a.length)[0];
  return key === undefined ? undefined : PRICES[key];
}

/** The list price of a call's usage in dollars (0 for a model the table does not know). */
export function listPriceUsd(
  model: string,
  usage: { readonly input_tokens: number; readonly output_tokens: number },
): number {
  const p = priceOf(model);
  if (!p) return 0;
  return (usage.input_tokens * p.input + usage.output_tokens * p.output) / 1e6;
}

/** What running a call's usage through Message Batches saved, in dollars. */
export function batchSavingUsd(
  model: string,
  usage: { readonly input_tokens: number; readonly output_tokens: number },
): number {
  return listPriceUsd(model, usage) * (1 - BATCH_PRICE_SHARE);
}

/** `$0.0123` with enough digits to show small amounts. */
export function formatUsd(usd: number): string {
  return `$${usd >= 100 ? usd.toFixed(0) : usd >= 1 ? usd.toFixed(2) : usd.toFixed(4)}`;
}
