/**
 * Money budgets in US dollars per UTC day and/or month, globally (`global`) and per tenant
 * (`tenant:acme`). A call's worst-case cost (input estimate and all of max_tokens at its
 * model's prices) is held when the limiter admits it, in the same script as its tokens, and
 * settled to the actual cost when it ends, in whole micro-dollars so sums are exact
 * (shared/limiter/lua/includes/money.lua). This file prices calls and reads the spend.
 */

import { z } from 'zod';
import { LlmqError } from './errors.ts';
import type { QueueNames } from './keys.ts';
import { moneyKeys } from './limiter/limiter-keys.ts';
import { costMicros, type ModelPrice, type PricedUsage, priceOf } from './prices.ts';
import type { RedisClient } from './redis.ts';

/**
 * A call's money, held with its admission (built by `BudgetLedger.claim`): its worst-case cost
 * in whole micro-dollars, the budgets it must fit, and every spend field it is charged to.
 */
export interface MoneyClaim {
  readonly micros: number;
  readonly limits: readonly {
    /** Its field in the spend hash, `<period id>|<budget>`. */
    readonly field: string;
    readonly budget: string;
    readonly period: 'day' | 'month';
    readonly limitMicros: number;
    /** When the period ends (ms since the epoch). */
    readonly resetsAt: number;
  }[];
  /** The limits' fields and the model's (`<period id>|model:<name>`). */
  readonly fields: readonly string[];
  /** The period ids whose spend is kept: this day, the day before, this month, the one before. */
  readonly periods: readonly string[];
}

/** A money budget without room for a call's worst case (denial reason `money`). */
export interface MoneyShortfall {
  readonly budget: string;
  readonly period: 'day' | 'month';
  readonly spentMicros: number;
  readonly limitMicros: number;
  /** When the budget's period ends (ms since the epoch). */
  readonly resetsAt: number;
  /** The worst case exceeds the budget outright: it could never fit. */
  readonly neverFits: boolean;
}

/** The money denial of an acquire, with its budget's limit and reset from the call's claim. */
export function moneyDenial(
  claim: MoneyClaim | undefined,
  r: { budget: string; period: 'day' | 'month'; spent: number; limit: number },
): { ok: false; reason: 'money'; waitMs: number; money: MoneyShortfall } {
  const l = claim?.limits.find((x) => x.budget === r.budget && x.period === r.period);
  const limitMicros = l?.limitMicros ?? r.limit;
  const money: MoneyShortfall = {
    budget: r.budget,
    period: r.period,
    spentMicros: r.spent,
    limitMicros,
    resetsAt: l?.resetsAt ?? Date.now(),
    neverFits: (claim?.micros ?? 0) > limitMicros,
  };
  return { ok: false, reason: 'money', waitMs: Math.max(money.resetsAt - Date.now(), 0), money };
}

export type Period = 'day' | 'month';
export const PERIODS: readonly Period[] = ['day', 'month'];
/**
 * What happens to a job whose budget is spent.
 * @inline
 */
export type BudgetPolicy = 'wait' | 'refuse' | 'dead-letter';

/**
 * One budget: dollars per day and/or per month.
 * @inline
 */
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

/**
 * Everything the producer and the worker need to apply budgets.
 * @inline
 */
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

  /** The error of an acquire's money denial. */
  static of(m: MoneyShortfall): BudgetExhaustedError {
    return new BudgetExhaustedError(
      m.budget,
      m.period,
      m.limitMicros / 1e6,
      m.spentMicros / 1e6,
      m.neverFits ? undefined : m.resetsAt,
    );
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

/** The ids of this period and the one before, whose spend is kept: day, day before, month, month before. */
function keptPeriods(now: number): string[] {
  const d = new Date(now);
  const lastMonth = Date.UTC(d.getUTCFullYear(), d.getUTCMonth() - 1, 1);
  return [
    periodOf('day', now).id,
    periodOf('day', now - 86_400_000).id,
    periodOf('month', now).id,
    periodOf('month', lastMonth).id,
  ];
}

/**
 * The queue's money in Redis: one hash of spend by `<period id>|<budget or model:name>` (under
 * the queue's hash tag; periods before the previous one are dropped), written by the limiter's
 * scripts. Builds the claims they hold and reads the spend.
 */
export class BudgetLedger {
  private readonly spendKey: string;
  constructor(
    private readonly redis: RedisClient,
    names: QueueNames,
    readonly settings: BudgetSettings,
    private readonly clock: () => number = Date.now,
  ) {
    this.spendKey = moneyKeys(names).spend;
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

  /**
   * What a call of `model` for `tenant` holds when admitted: its worst case (`cost`: input
   * estimate and max_tokens) under every budget of the tenant, and as the model's spend.
   */
  claim(
    model: string,
    tenant: string | undefined,
    cost: { readonly inputTokens: number; readonly outputTokens: number },
  ): MoneyClaim {
    const now = this.clock();
    const periods = keptPeriods(now);
    const ids = { day: periods[0]!, month: periods[2]! };
    const limits: MoneyClaim['limits'][number][] = [];
    for (const budget of budgetNames(tenant)) {
      for (const period of PERIODS) {
        const limit = this.settings.budgets[budget]?.[period];
        if (limit === undefined) continue;
        const field = `${ids[period]}|${budget}`;
        const resetsAt = periodOf(period, now).endsAt;
        limits.push({ field, budget, period, limitMicros: Math.round(limit * 1e6), resetsAt });
      }
    }
    const fields = [
      ...limits.map((l) => l.field),
      ...PERIODS.map((p) => `${ids[p]}|model:${model}`),
    ];
    return { micros: worstCaseMicros(this.settings, model, cost), limits, fields, periods };
  }

  /** The first budget of the tenant without room for `micros` now (reads only). */
  async noRoom(
    tenant: string | undefined,
    micros: number,
  ): Promise<BudgetExhaustedError | undefined> {
    const { limits } = this.claim('', tenant, { inputTokens: 0, outputTokens: 0 });
    if (limits.length === 0) return undefined;
    const spent = await this.redis.hmget(this.spendKey, ...limits.map((l) => l.field));
    for (const [i, l] of limits.entries()) {
      const s = Number(spent[i] ?? 0);
      if (s + micros > l.limitMicros)
        return new BudgetExhaustedError(
          l.budget,
          l.period,
          l.limitMicros / 1e6,
          s / 1e6,
          l.resetsAt,
        );
    }
    return undefined;
  }

  /** Spend of the current day and month, by budget and model, in µ$. */
  async spend(): Promise<Record<Period, PeriodSpend>> {
    const now = this.clock();
    const all = await this.redis.hgetall(this.spendKey);
    const out: Record<Period, PeriodSpend> = { day: {}, month: {} };
    for (const period of PERIODS) {
      const prefix = `${periodOf(period, now).id}|`;
      for (const [k, v] of Object.entries(all)) {
        if (k.startsWith(prefix)) out[period][k.slice(prefix.length)] = Number(v);
      }
    }
    return out;
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
