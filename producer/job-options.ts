import type { JobData } from '../shared/job.ts';
import { ticketOf } from '../shared/job-ticket.ts';
import type { ProducerOptions } from './producer-options.ts';

const DAY_S = 24 * 3600;

/** A job's BullMQ options: its priority, its attempts, and how long it is kept once finished. */
export type JobOptionsOf = (data: JobData, attempts: number) => Record<string, unknown>;

/**
 * The BullMQ options of the jobs a producer adds. Completed jobs (their result, their
 * idempotency key) are kept 7 days or the last 100 000, failed ones 7 days, unless told.
 */
export function jobOptionsFor(
  o: Pick<ProducerOptions, 'keepCompletedS' | 'keepCompletedCount' | 'keepFailedS'>,
): JobOptionsOf {
  const completedS = o.keepCompletedS ?? 7 * DAY_S;
  const completedCount = o.keepCompletedCount ?? 100_000;
  const failedS = o.keepFailedS ?? 7 * DAY_S;
  return (data, attempts) => ({
    // What the gate schedules by, where the request cannot write (see shared/job-ticket.ts).
    llmq: ticketOf(data),
    priority: data.priority,
    attempts,
    removeOnComplete: { age: completedS, count: completedCount },
    removeOnFail: { age: failedS },
  });
}
