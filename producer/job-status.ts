import type { DeadLetter, JobData, JobResult } from '../shared/job.ts';
import type { StoredJobData } from '../shared/job-kept.ts';
import type { DeadLetterQueue, LlmqQueue } from '../shared/queues.ts';
import { readStoredResult } from '../shared/result-codec.ts';

/** Where a job is, as producers see it. `waiting` covers BullMQ's wait and prioritized. */
export type JobPhase = 'waiting' | 'delayed' | 'active' | 'completed' | 'failed';

/**
 * Why a job was dead-lettered, in the words of its dead letter.
 * @inline
 */
export interface JobFailure {
  /** The dead letter's one-line reason. */
  readonly reason: string;
  /** The provider's error class (`BadRequestError`, …) or llmq's (`AttemptsExhausted`, …). */
  readonly errorClass?: string | undefined;
  /** The provider's HTTP status, when it answered. */
  readonly status?: number | undefined;
}

/**
 * A job's status, as `producer.status(id)` reads it: `waiting`, `delayed` (a retry in
 * backoff), `active`, `completed` with its `result`, or `failed` (dead-lettered) with its
 * `error`. `via` is `batches` for a job bound for Message Batches.
 *
 * @example
 * ```ts
 * const s = await producer.status(id);
 * if (s?.state === 'completed') console.log(s.result.message.usage);
 * ```
 */
export type JobStatus = StatusByState & { readonly via?: 'batches' | undefined };

/**
 * A job's state, with its result once completed and its failure once dead-lettered.
 * @inline
 */
type StatusByState =
  | {
      readonly id: string;
      /** Not finished yet. */
      readonly state: 'waiting' | 'delayed' | 'active';
      /** The job's stored data. @internal */
      readonly data: JobData;
    }
  | {
      readonly id: string;
      /** Finished with an answer. */
      readonly state: 'completed';
      /** The job's stored data: its request let go, only its record kept. @internal */
      readonly data: StoredJobData;
      /** The answer and how it went. */
      readonly result: JobResult;
    }
  | {
      readonly id: string;
      /** Dead-lettered: it will not answer unless retried (`llmq dlq retry`). */
      readonly state: 'failed';
      /** The job's stored data. @internal */
      readonly data: JobData;
      /** Why it failed. */
      readonly error: JobFailure;
      /** The whole dead letter, when the worker wrote one. @internal */
      readonly deadLetter: DeadLetter | undefined;
    };

/** Reads a job's state and, once it finished, its result or its dead letter; null when there is no such job. */
export async function readJobStatus(
  queue: LlmqQueue,
  deadLetters: DeadLetterQueue,
  id: string,
): Promise<JobStatus | null> {
  // State first: once it says finished, the job's hash already holds the outcome.
  const state = await queue.getJobState(id);
  if (state === 'unknown') return null;
  const job = await queue.getJob(id);
  if (!job) return null;
  switch (state) {
    case 'completed':
      return { id, state, data: job.data, result: readStoredResult(job.returnvalue) };
    case 'failed': {
      const letter = (await deadLetters.getJob(id))?.data;
      const error: JobFailure = letter
        ? { reason: letter.reason, errorClass: letter.errorClass, status: letter.status }
        : { reason: job.failedReason || 'failed without a reason' };
      return { id, state, data: job.data, error, deadLetter: letter };
    }
    case 'active':
    case 'delayed':
      return { id, state, data: job.data };
    default:
      // wait, prioritized, waiting-children
      return { id, state: 'waiting', data: job.data };
  }
}
