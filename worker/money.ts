/** A job's money: its worst-case cost reserved before the call, settled to the actual after. */
import {
  actualMicros,
  type BudgetExhaustedError,
  type BudgetLedger,
  worstCaseMicros,
} from '../shared/budgets.ts';
import type { PricedUsage } from '../shared/prices.ts';
import type { HeadJob } from './bullmq-internals.ts';

/** Reserves the head job's worst case under its budgets; the budget without room, if any. */
export function reserveMoney(
  ledger: BudgetLedger,
  head: HeadJob,
): Promise<BudgetExhaustedError | undefined> {
  const micros = worstCaseMicros(ledger.settings, head.model, head.cost);
  return ledger.reserve(head.id, head.model, head.tenant, micros);
}

/** Settles a job's reservation to what its usage cost (no usage: nothing was charged). */
export function settleMoney(
  ledger: BudgetLedger | undefined,
  jobId: string,
  model: string,
  usage: PricedUsage | undefined,
): Promise<void> {
  if (!ledger) return Promise.resolve();
  return ledger.settle(jobId, usage ? actualMicros(ledger.settings, model, usage) : 0);
}
