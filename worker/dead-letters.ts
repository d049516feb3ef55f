import { type Job, UnrecoverableError } from 'bullmq';
import type { AttemptRecord, DeadLetter, JobData, JobResult } from '../shared/job.ts';
import { JOB_NAME } from '../shared/job.ts';
import { holdsRequest, modelOf, type StoredJobData } from '../shared/job-kept.ts';
import { ticketOf } from '../shared/job-ticket.ts';
import type { DeadLetterQueue, LlmqQueue } from '../shared/queues.ts';
import type { RedisClient } from '../shared/redis.ts';
import { keepFailedRecord } from './bullmq-internals.ts';
import {
  DEFAULT_DEAD_LETTER_BOUNDS,
  type DeadLetterBounds,
  forgetDeadLetter,
  keepDeadLetter,
} from './dead-letter-bounds.ts';
import { indexWaiting } from './fair-share.ts';

export interface DeadLetterCause {
  readonly reason: string;
  readonly errorClass: string;
  readonly status?: number | undefined;
  readonly providerType?: string | undefined;
  readonly providerMessage?: string | undefined;
}

/**
 * Moves a job that cannot succeed to the dead letters: the letter first (its id is the job's,
 * so a crash between the steps cannot make a second letter), counted against the dead-letter
 * bounds (the oldest letters over them dropped); then the job to failed, where it keeps only
 * its request's record: the letter holds the request, once.
 */
export async function deadLetter(
  dlq: DeadLetterQueue,
  job: Job<JobData, JobResult>,
  token: string,
  cause: DeadLetterCause,
  history: readonly AttemptRecord[],
  bounds: DeadLetterBounds = DEFAULT_DEAD_LETTER_BOUNDS,
): Promise<void> {
  const letter: DeadLetter = {
    jobId: job.id!,
    queue: job.queueName,
    data: { ...job.data, history },
    reason: cause.reason,
    errorClass: cause.errorClass,
    status: cause.status,
    providerType: cause.providerType,
    providerMessage: cause.providerMessage,
    attempts: history,
    deadAt: Date.now(),
  };
  const jobId = letterIdOf(job.id!);
  await dlq.add(JOB_NAME, letter, { jobId, removeOnComplete: false, removeOnFail: false });
  const bytes = Buffer.byteLength(JSON.stringify(letter));
  await keepDeadLetter(dlq, { id: jobId, bytes, tenant: job.data?.tenant }, bounds);
  await job.moveToFailed(new UnrecoverableError(cause.reason), token, false);
  // A job whose data is no llmq job's has no request to let go.
  if (letter.data?.request)
    await keepFailedRecord(dlq.opts.connection as RedisClient, job, letter.data);
}

/**
 * A dead-lettered job sent back to run without its letter (BullMQ's `job.retry`, a script)
 * holds only its request's record: its request is read back from its letter, which holds it
 * (the letter stays, settled by `llmq dlq retry` as for a job retried another way). Resolves
 * with whether it was restored; false when it held its request or its letter is gone.
 */
export async function restoreFromLetter(
  dlq: DeadLetterQueue,
  job: Job<JobData, JobResult>,
): Promise<boolean> {
  const data = job.data as StoredJobData | undefined;
  if (!data || holdsRequest(data) || typeof data.digest !== 'string') return false;
  const letter = (await dlq.getJob(letterIdOf(job.id!)))?.data;
  if (!letter?.data?.request) return false;
  await job.updateData({ ...letter.data, history: data.history ?? [] });
  return true;
}

/**
 * A letter's id: its job's, or for a job with BullMQ's own numeric id (added without llmq),
 * `job-<id>`, as BullMQ refuses a numeric custom id. Either form finds the letter.
 */
export function letterIdOf(jobId: string): string {
  return /^\d+$/.test(jobId) ? `job-${jobId}` : jobId;
}

export interface DeadLetterSummary {
  readonly id: string;
  readonly reason: string;
  readonly errorClass: string;
  readonly status?: number | undefined;
  /** Tries of its own: those that spent an attempt, and transient failures (429s aside). */
  readonly attempts: number;
  readonly deadAt: number;
  readonly tenant?: string | undefined;
  readonly model: string;
}

function summary(j: Job<DeadLetter>): DeadLetterSummary {
  return {
    id: j.id!,
    reason: j.data.reason,
    errorClass: j.data.errorClass,
    status: j.data.status,
    attempts: j.data.attempts.filter((a) => a.counted || a.transient).length,
    deadAt: j.data.deadAt,
    tenant: j.data.data?.tenant,
    // A letter of a job that could not be read may have no request.
    model: modelOf(j.data.data) as string,
  };
}

/** The dead letters of a queue, oldest first. */
export async function listDeadLetters(
  dlq: DeadLetterQueue,
  limit = 1_000,
): Promise<DeadLetterSummary[]> {
  const jobs = await dlq.getJobs(['waiting', 'prioritized', 'delayed'], 0, limit - 1, true);
  return jobs
    .filter(Boolean)
    .map(summary)
    .sort((a, b) => a.deadAt - b.deadAt);
}

export async function showDeadLetter(
  dlq: DeadLetterQueue,
  id: string,
): Promise<DeadLetter | undefined> {
  const j = await dlq.getJob(letterIdOf(id));
  return j?.data;
}

/**
 * Sends a dead letter back to its queue with fresh attempts and retryFor. The original job is
 * retried in place (same id, so whoever waits on it sees the new outcome); when it is gone, a
 * new job is added from the letter. Resolves with the id of the job that will run.
 */
export async function retryDeadLetter(
  dlq: DeadLetterQueue,
  queue: LlmqQueue,
  id: string,
): Promise<string | undefined> {
  const letter = await dlq.getJob(letterIdOf(id));
  if (!letter) return undefined;
  const data: JobData = {
    ...letter.data.data,
    history: [],
    rateLimitReturns: 0,
    retrying: undefined,
  };
  const original = await queue.getJob(letter.data.jobId);
  let runId: string;
  if (original && (await original.isFailed())) {
    await original.updateData(data);
    await original.retry('failed', { resetAttemptsMade: true, resetAttemptsStarted: true });
    runId = original.id!;
  } else if (original) {
    // Already back in the queue (retried from Bull Board, say) or done: a second job would run
    // the same request twice. The letter is settled; the job under its id is the answer.
    runId = original.id!;
  } else {
    // The original is gone (removed, or aged out of the failed set): add it again under its
    // letter's id (its own, unless BullMQ numbered it), so whoever holds the id finds the job.
    const added = await queue.add(JOB_NAME, data, {
      jobId: letter.id!,
      priority: data.priority,
      attempts: 5,
      llmq: ticketOf(data),
    } as Parameters<typeof queue.add>[2]);
    runId = added.id!;
  }
  // Back in the prioritized set: fair share finds it as it finds a new job.
  await indexWaiting(queue, [{ id: runId, tenant: data.tenant }]);
  await letter.remove();
  await forgetDeadLetter(dlq, letter.id!);
  return runId;
}

/** Deletes dead letters older than `olderThanMs` (all when 0); resolves with how many. */
export async function purgeDeadLetters(dlq: DeadLetterQueue, olderThanMs = 0): Promise<number> {
  const now = Date.now();
  let removed = 0;
  for (const s of await listDeadLetters(dlq, 1_000_000)) {
    if (olderThanMs > 0 && now - s.deadAt < olderThanMs) continue;
    const j = await dlq.getJob(s.id);
    if (j) {
      await j.remove();
      await forgetDeadLetter(dlq, s.id);
      removed++;
    }
  }
  return removed;
}
