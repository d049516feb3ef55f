/**
 * Cancelling a job that has not started: take it out of the waiting states atomically (no
 * worker can pick it up after that), then remove it; a take-out whose removal never happened
 * (its producer died between the two) is finished by the next cancel.
 */
import type { LlmqQueue } from '../shared/queues.ts';
import type { DepthGate } from './depth-gate.ts';
import type { JobStatus } from './job-status.ts';

/**
 * How a cancel ended: `cancelled`, no such job, or the state that forbids it.
 * @inline
 */
export type CancelOutcome = 'cancelled' | 'not_found' | 'active' | 'completed' | 'failed';

/** What cancelling needs of the producer. */
export interface CancelContext {
  readonly queue: LlmqQueue;
  readonly gate: DepthGate;
  /** Runs a Redis operation under the producer's deadline. */
  call<T>(op: () => Promise<T>): Promise<T>;
  status(id: string): Promise<JobStatus | null>;
}

/** Cancels job `id` unless it has started or finished. */
export async function cancelJob(ctx: CancelContext, id: string): Promise<CancelOutcome> {
  await finishStrandedCancels(ctx);
  for (let tries = 0; tries < 3; tries++) {
    if (await ctx.gate.takeWaiting(id)) {
      await removeCancelled(ctx, id);
      return 'cancelled';
    }
    const status = await ctx.status(id);
    if (!status) return 'not_found';
    if (status.state === 'active' || status.state === 'completed' || status.state === 'failed')
      return status.state;
    // It moved between the two reads (a retry came back to waiting): try again.
  }
  return 'active';
}

/** Removes the jobs taken out over `olderThanMs` ago but never removed; resolves how many. */
export async function finishStrandedCancels(
  ctx: CancelContext,
  olderThanMs = 30_000,
): Promise<number> {
  const ids = await ctx.gate.strandedCancels(olderThanMs);
  for (const id of ids) await removeCancelled(ctx, id);
  return ids.length;
}

async function removeCancelled(ctx: CancelContext, id: string): Promise<void> {
  await ctx.call(() => ctx.queue.remove(id));
  await ctx.gate.cancelled(id);
}
