import { RequestValidationError } from '../../shared/errors.ts';
import { JOB_NAME, type JobData, type JobResult } from '../../shared/job.ts';
import type { QueueNames } from '../../shared/keys.ts';
import {
  batchNames,
  type DeadLetterQueue,
  type LlmqQueue,
  openBatchQueue,
} from '../../shared/queues.ts';
import type { RedisClient } from '../../shared/redis.ts';
import { jobIdForKey, newJobId, refuseOtherRequest } from '../idempotency.ts';
import type { EnqueuedJob, EnqueueOptions } from '../producer-options.ts';
import { ResultWaiter, type WaitOptions } from '../result-waiter.ts';

/** Refuses what the Message Batches API refuses, before anything is written. */
export function checkBatchable(request: unknown, options: EnqueueOptions): void {
  const streamed = (request as { stream?: unknown } | null)?.stream === true;
  if (streamed || options.stream === true) {
    throw new RequestValidationError([
      {
        field: 'stream',
        message:
          "the Message Batches API does not stream: drop stream, or send the job via 'messages'",
      },
    ]);
  }
  const d = options.deadlineAt;
  if (d !== undefined && !(Number.isFinite(d) && d > Date.now())) {
    throw new RequestValidationError([
      { field: 'deadlineAt', message: `must be a time in the future (got ${JSON.stringify(d)})` },
    ]);
  }
}

/**
 * The batch-bound side of a producer: jobs added to `<queue>-batches` (which no worker's gate
 * reads; the batch submitter takes them), and a result waiter on that queue. Results and dead
 * letters have the same shape as through `messages`; dead letters go to the queue's own.
 */
export class BatchJobs {
  readonly queue: LlmqQueue;
  private waiter: ResultWaiter | undefined;

  constructor(
    private readonly redis: RedisClient,
    private readonly names: QueueNames,
    private readonly deadLetters: DeadLetterQueue,
  ) {
    this.queue = openBatchQueue(redis, names);
  }

  /** Adds one prepared job unless its id is there already. */
  async add(
    data: JobData,
    options: EnqueueOptions,
    jobOptions: Record<string, unknown>,
  ): Promise<EnqueuedJob> {
    const id =
      options.idempotencyKey !== undefined
        ? jobIdForKey(options.idempotencyKey, data.tenant)
        : newJobId();
    const existing = await this.queue.getJob(id);
    if (existing) {
      refuseOtherRequest(id, existing, data.digest);
      return { id, created: false };
    }
    const withDeadline =
      options.deadlineAt !== undefined ? { ...data, deadlineAt: options.deadlineAt } : data;
    await this.queue.add(JOB_NAME, withDeadline, { ...jobOptions, jobId: id });
    return { id, created: true };
  }

  /** Resolves with a batch-bound job's result (or rejects as {@link Producer.waitForResult}). */
  async wait(id: string, options: WaitOptions = {}): Promise<JobResult> {
    this.waiter ??= new ResultWaiter({
      redis: this.redis,
      names: batchNames(this.names),
      queue: this.queue,
      deadLetters: this.deadLetters,
    });
    return this.waiter.wait(id, options);
  }

  async close(): Promise<void> {
    await this.waiter?.close();
    await this.queue.close();
  }
}
