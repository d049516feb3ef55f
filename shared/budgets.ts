/**
 * Money budgets in US dollars per UTC day and/or month, globally (`global`) and per tenant
 * (`tenant:acme`). A call's worst-case cost (input estimate and all of max_tokens at its
 * model's prices) is reserved before the call and settled to the actual cost after it, in
 * whole micro-dollars so sums are exact.
 */

import { z } from 'zod';
import { LlmqError } from './errors.ts';
import { llmqKey, type QueueNames } from './keys.ts';
import { loadLuaScripts, runLua } from './lua-scripts.ts';
import { costMicros, type ModelPrice, type PricedUsage, priceOf } from './prices.ts';
import type { RedisClient } from './redis.ts';

const SCRIPTS = loadLuaScripts(new URL('./lua', import.meta.url).pathname);

export type Period = 'day' | 'month';
export const PERIODS: readonly Period[] = ['day', 'month'];
/** What happens to a job whose budget is spent. */
export type BudgetPolicy = 'wait' | 'refuse' | 'dead-letter';

/** One budget: dollars per day and/or per month. */
export interface BudgetLimits {
  readonly day?: number | undefined;
  readonly month?: number | undefined;
}

const usd = z.number().finite().positive();
/** `budgets` in a config: budget name (`global`, `tenant:<name>`) to its dollars per period. */
export const budgetsSchema = z.record(
  z.string().regex(/^(global|tenant:[A-Za-z0-9_.-]{1,100})$/),
  z
    .strictObject({ day: usd.optional(), month: usd.optional() })
    .refine((b) => b.day !== undefined || b.month !== undefined, {
      message: 'a budget needs a period: day and/or month',
    }),
);

/** Everything the producer and the worker need to apply budgets. */
export interface BudgetSettings {
  readonly budgets: Readonly<Record<string, BudgetLimits>>;
  readonly policy: BudgetPolicy;
  /** The price table (shipped, with the config's overrides). */
  readonly prices: Readonly<Record<string, ModelPrice>>;
}

/** The budget names a job falls under: global, and its tenant's. */
export function budgetNames(tenant: string | undefined): string[] {
  return tenant ? ['global', `tenant:${tenant}`] : ['global'];
}

/** The period's id and when the next one starts (UTC): `2026-12-01` / `2026-12`. */
export function periodOf(period: Period, nowMs: number): { id: string; endsAt: number } {
  const d = new Date(nowMs);
  const y = d.getUTCFullYear();
  const m = d.getUTCMonth();
  if (period === 'day') {
    return { id: d.toISOString().slice(0, 10), endsAt: Date.UTC(y, m, d.getUTCDate() + 1) };
  }
  return { id: d.toISOString().slice(0, 7), endsAt: Date.UTC(y, m + 1, 1) };
}

/** A budget is spent (or a job could never fit it). */
export class BudgetExhaustedError extends LlmqError {
  readonly budget: string;
  readonly period: Period;
  /** When the budget's period ends (ms since the epoch); undefined when it can never fit. */
  readonly resetsAt: number | undefined;
  constructor(
    budget: string,
    period: Period,
    limitUsd: number,
    spentUsd: number,
    resetsAt?: number,
  ) {
    const every = period === 'day' ? 'daily' : 'monthly';
    super(
      'BUDGET_EXHAUSTED',
      resetsAt === undefined
        ? `the request's worst-case cost exceeds the ${every} budget "${budget}" of $${limitUsd} however long it waits: lower max_tokens or raise the budget`
        : `budget_exhausted: the ${every} budget "${budget}" of $${limitUsd} is spent ($${spentUsd.toFixed(6)}); ` +
            `it resets at ${new Date(resetsAt).toISOString()}`,
    );
    this.budget = budget;
    this.period = period;
    this.resetsAt = resetsAt;
  }
}

/** The worst-case cost of a call in µ$: its input estimate and all of max_tokens. */
export function worstCaseMicros(
  s: BudgetSettings,
  model: string,
  cost: { readonly inputTokens: number; readonly outputTokens: number },
): number {
  const p = priceOf(model, s.prices);
  if (!p) return 0;
  return costMicros(p, { input_tokens: cost.inputTokens, output_tokens: cost.outputTokens });
}

/** The actual cost of a call in µ$ (0 for a model without a price). */
export function actualMicros(s: BudgetSettings, model: string, usage: PricedUsage): number {
  const p = priceOf(model, s.prices);
  return p ? costMicros(p, usage) : 0;
}

/** Spend of one period, by budget and `model:<name>`, in µ$. */
export type PeriodSpend = Record<string, number>;

/** The queue's money ledger in Redis (keys under the queue's hash tag, gone after their period). */
export class BudgetLedger {
  constructor(
    private readonly redis: RedisClient,
    private readonly names: QueueNames,
    readonly settings: BudgetSettings,
    private readonly clock: () => number = Date.now,
  ) {}

  private keys(now: number): [string, string, string] {
    return [
      llmqKey(this.names, 'budget', 'day', periodOf('day', now).id),
      llmqKey(this.names, 'budget', 'month', periodOf('month', now).id),
      llmqKey(this.names, 'budget', 'res'),
    ];
  }

  /** The first budget `micros` can never fit, as an error. */
  neverFits(tenant: string | undefined, micros: number): BudgetExhaustedError | undefined {
    for (const name of budgetNames(tenant)) {
      const b = this.settings.budgets[name];
      for (const period of PERIODS) {
        const limit = b?.[period];
        if (limit !== undefined && micros > Math.round(limit * 1e6))
          return new BudgetExhaustedError(name, period, limit, 0);
      }
    }
    return undefined;
  }

  /** The first budget of the tenant without room for `micros` now (reads only). */
  async noRoom(
    tenant: string | undefined,
    micros: number,
  ): Promise<BudgetExhaustedError | undefined> {
    const now = this.clock();
    const [day, month] = this.keys(now);
    const names = budgetNames(tenant);
    const [d, m] = await Promise.all([
      this.redis.hmget(day, ...names),
      this.redis.hmget(month, ...names),
    ]);
    for (const [i, name] of names.entries()) {
      for (const period of PERIODS) {
        const limit = this.settings.budgets[name]?.[period];
        if (limit === undefined) continue;
        const spent = Number((period === 'day' ? d : m)[i] ?? 0);
        if (spent + micros > Math.round(limit * 1e6))
          return new BudgetExhaustedError(
            name,
            period,
            limit,
            spent / 1e6,
            periodOf(period, now).endsAt,
          );
      }
    }
    return undefined;
  }

  /**
   * Reserves `micros` under every budget of the tenant; answers the budget without room as an
   * error (nothing reserved then).
   */
  async reserve(
    id: string,
    model: string,
    tenant: string | undefined,
    micros: number,
  ): Promise<BudgetExhaustedError | undefined> {
    const now = this.clock();
    const triples: (string | number)[] = [];
    for (const name of budgetNames(tenant)) {
      const b = this.settings.budgets[name];
      for (const period of PERIODS) {
        const limit = b?.[period];
        if (limit !== undefined) triples.push(name, period, Math.round(limit * 1e6));
      }
    }
    const day = periodOf('day', now);
    const month = periodOf('month', now);
    const reply = (await runLua(this.redis, SCRIPTS['budget']!, this.keys(now), [
      'reserve',
      id,
      micros,
      // Kept a period past their end, for status to show the last one.
      day.endsAt + 86_400_000,
      month.endsAt + 86_400_000,
      model,
      ...triples,
    ])) as [number, string?, Period?, number?];
    if (reply[0] === 0) return undefined;
    const [, name, period, spent] = reply as [number, string, Period, number];
    const limit = this.settings.budgets[name]![period]!;
    const resetsAt = period === 'day' ? day.endsAt : month.endsAt;
    return new BudgetExhaustedError(name, period, limit, spent / 1e6, resetsAt);
  }

  /** Settles a reservation to the actual cost (0 gives it all back). */
  async settle(id: string, micros: number): Promise<void> {
    await runLua(this.redis, SCRIPTS['budget']!, this.keys(this.clock()), ['settle', id, micros]);
  }

  /** Spend of the current day and month, by budget and model, in µ$. */
  async spend(): Promise<Record<Period, PeriodSpend>> {
    const [day, month] = this.keys(this.clock());
    const [d, m] = await Promise.all([this.redis.hgetall(day), this.redis.hgetall(month)]);
    const num = (h: Record<string, string>) =>
      Object.fromEntries(Object.entries(h).map(([k, v]) => [k, Number(v)]));
    return { day: num(d), month: num(m) };
  }
}

/** One line of spend: a budget's or a model's, in one period. */
export interface SpendLine {
  /** `global`, `tenant:acme`, or `model:<name>` (spend only, no budget). */
  readonly name: string;
  readonly period: Period;
  readonly spentUsd: number;
  /** The budget, when one is set. */
  readonly limitUsd?: number | undefined;
  /** When the period ends (ms since the epoch). */
  readonly resetsAt: number;
}

/** Spend against budget per budget and per model, this day and month. */
export async function spendReport(ledger: BudgetLedger, nowMs = Date.now()): Promise<SpendLine[]> {
  const spend = await ledger.spend();
  const lines: SpendLine[] = [];
  for (const period of PERIODS) {
    const resetsAt = periodOf(period, nowMs).endsAt;
    const names = new Set([
      ...Object.entries(ledger.settings.budgets)
        .filter(([, b]) => b[period] !== undefined)
        .map(([n]) => n),
      ...Object.keys(spend[period]),
    ]);
    for (const name of [...names].sort()) {
      const limitUsd = ledger.settings.budgets[name]?.[period];
      lines.push({ name, period, spentUsd: (spend[period][name] ?? 0) / 1e6, limitUsd, resetsAt });
    }
  }
  return lines;
}
