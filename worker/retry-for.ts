import { formatSpan } from '../shared/duration.ts';
import { MAX_RETRY_FOR_MS, type RetryClock } from '../shared/job.ts';

/**
 * Transient failures are retried by time. The clock starts at a job's first transient failure,
 * not at its first call: time spent waiting for budget before it is no failure of the provider.
 * Time behind an open breaker does not count either (the breaker's outage total is taken at
 * each failure and the difference subtracted), so a long outage leaves jobs waiting, not
 * dead-lettered. Both run on Redis's clock, which the breaker's failure answers with.
 */

/** The job's clock, started now when it has none. */
export function clockOf(clock: RetryClock | undefined, now: number, outageMs: number): RetryClock {
  return clock ?? { since: now, outageMs };
}

/** The time a job has retried transient failures for, outages left out (ms). */
export function retriedFor(clock: RetryClock, now: number, outageMs: number): number {
  const wall = Math.max(0, now - clock.since);
  // A breaker that was reset reads less than before: then no outage is known, none is left out.
  const outage = Math.min(wall, Math.max(0, outageMs - clock.outageMs));
  return wall - outage;
}

/** The job's own retryFor when it is a valid one, else the worker's. */
export function retryForOf(value: unknown, fallback: number): number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0
    ? Math.min(value, MAX_RETRY_FOR_MS)
    : fallback;
}

/** The dead letter's reason once the time is used up. */
export function retryForSpent(spentMs: number, retryForMs: number, reason: string): string {
  return `transient failures for ${formatSpan(spentMs)}, past its retryFor of ${formatSpan(retryForMs)}: ${reason}`;
}
