/**
 * A job's money: its worst-case cost, claimed with its admission (the limiter holds it in the
 * same script as the job's tokens), settled to the actual cost with its tokens.
 */
import { actualMicros, type BudgetLedger } from '../shared/budgets.ts';
import type { Charge } from '../shared/limiter/types.ts';
import type { PricedUsage } from '../shared/prices.ts';
import type { HeadJob } from './head-job.ts';

/**
 * What admitting a head job charges: its tokens, its money with budgets, its own scopes if asked;
 * it takes the job (one admission per job).
 */
export function chargeOf(
  ledger: BudgetLedger | undefined,
  head: HeadJob,
  ownScopes = false,
): Charge {
  return {
    ...head.cost,
    money: ledger?.claim(head.model, head.tenant, head.cost),
    scopes: ownScopes ? head.scopes : undefined,
    // One admission per job, whichever worker peeked it first.
    take: head.id,
  };
}

/** A call's actual cost in µ$, for its settle (undefined without budgets). */
export function costMicrosOf(
  ledger: BudgetLedger | undefined,
  model: string,
  usage: PricedUsage,
): number | undefined {
  return ledger ? actualMicros(ledger.settings, model, usage) : undefined;
}
