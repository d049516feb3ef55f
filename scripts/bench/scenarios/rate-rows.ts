import type { MockStats } from '../../../testing/mock-anthropic/index.ts';
import { type Accounting, utilization } from '../budget.ts';
import type { ClientRun } from '../clients/run-baseline.ts';
import { chargeOf, type RecorderReport } from '../recorder.ts';
import { count, percent, ratio, seconds } from '../table.ts';

/** The figures of one client in a rate-limit scenario. */
export interface RateRow {
  readonly client: string;
  readonly completed: number;
  readonly total: number;
  readonly failed: number;
  /** 429 responses this client received. */
  readonly rateLimited: number;
  /** HTTP attempts this client made. */
  readonly attempts: number;
  readonly wallMs: number;
  /** From the first admitted call to the last, as the provider admitted them. */
  readonly admissionSpanMs: number;
  /** The mock's worst window (total tokens) and its limit. */
  readonly worstWindow: number;
  readonly limit: number;
  /** Tokens this client had admitted per window over the limit (see budget.ts). */
  readonly utilization: number;
  /** The ideal first-come-first-served client's wall time (budget.ts, idealSchedule). */
  readonly minimumMs: number;
  readonly wallOverMinimum: number;
  /** The fluid minimum (budget.ts, fluidMinimumMs): no client can beat it. */
  readonly fluidMs: number;
  readonly wallOverFluid: number;
  /** The article's figures for this client, when it has them. */
  readonly published?: string | undefined;
  readonly errors: Readonly<Record<string, number>>;
}

export const RATE_HEADERS = [
  'client',
  'completed',
  '429s',
  'attempts',
  'wall',
  'worst window / limit',
  'utilization',
  'wall / ideal',
  'wall / fluid',
  'published',
] as const;

export interface RateRowInput {
  readonly client: string;
  readonly run: ClientRun;
  readonly calls: RecorderReport;
  readonly stats: MockStats;
  readonly total: number;
  readonly limit: number;
  readonly windowMs: number;
  readonly accounting: Accounting;
  /** The ideal client's wall time. */
  readonly minimumMs: number;
  /** The fluid minimum; NaN when not computed. */
  readonly fluidMs?: number | undefined;
  readonly published?: string | undefined;
  /** The limit the worst window and utilization are of. @default 'tokens' (input + output) */
  readonly dimension?: 'tokens' | 'output';
}

export function rateRow(i: RateRowInput): RateRow {
  const output = i.dimension === 'output';
  const admissions = i.calls.admitted.map((c) => ({
    at: c.at,
    charge: chargeOf(c, i.accounting) - (output ? c.input : 0),
  }));
  return {
    client: i.client,
    completed: i.run.completed,
    total: i.total,
    failed: i.run.failed,
    rateLimited: i.calls.statuses['429'] ?? 0,
    attempts: i.calls.attempts,
    wallMs: i.run.wallMs,
    admissionSpanMs: admissions.length > 1 ? admissions.at(-1)!.at - admissions[0]!.at : 0,
    worstWindow: output ? i.stats.worstWindow.output_tokens : i.stats.worstWindow.tokens,
    limit: i.limit,
    utilization: utilization(admissions, i.limit, i.windowMs).mean,
    minimumMs: i.minimumMs,
    wallOverMinimum: i.run.wallMs / i.minimumMs,
    fluidMs: i.fluidMs ?? Number.NaN,
    wallOverFluid: i.run.wallMs / (i.fluidMs ?? Number.NaN),
    published: i.published,
    errors: i.run.errors,
  };
}

export function rateCells(r: RateRow): string[] {
  return [
    r.client,
    `${r.completed}/${r.total}`,
    count(r.rateLimited),
    count(r.attempts),
    seconds(r.wallMs),
    `${count(r.worstWindow)}/${count(r.limit)}`,
    percent(r.utilization),
    ratio(r.wallOverMinimum),
    ratio(r.wallOverFluid),
    r.published ?? '',
  ];
}
