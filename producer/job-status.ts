import type { DeadLetter, JobData, JobResult } from '../shared/job.ts';
import type { DeadLetterQueue, LlmqQueue } from '../shared/queues.ts';

/** Where a job is, as producers see it. `waiting` covers BullMQ's wait and prioritized. */
export type JobPhase = 'waiting' | 'delayed' | 'active' | 'completed' | 'failed';

/** Why a job was dead-lettered, in the words of its dead letter. */
export interface JobFailure {
  readonly reason: string;
  readonly errorClass?: string | undefined;
  readonly status?: number | undefined;
}

/** A job's status; `via` is `batches` for a job bound for Message Batches. */
export type JobStatus = StatusByState & { readonly via?: 'batches' | undefined };

type StatusByState =
  | {
      readonly id: string;
      readonly state: 'waiting' | 'delayed' | 'active';
      readonly data: JobData;
    }
  | {
      readonly id: string;
      readonly state: 'completed';
      readonly data: JobData;
      readonly result: JobResult;
    }
  | {
      readonly id: string;
      readonly state: 'failed';
      readonly data: JobData;
      readonly error: JobFailure;
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
      return { id, state, data: job.data, result: job.returnvalue };
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
