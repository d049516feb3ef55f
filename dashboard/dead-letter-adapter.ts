/**
 * Bull Board's view of a queue's dead letters: each letter is shown as a failed job with its
 * reason (the one place a dead-lettered job is counted), with the job's history as its logs.
 * Retrying one does what `llmq dlq retry` does; cleaning failed purges letters. Nothing consumes
 * this queue, so Bull Board is told it cannot say who works on it (no "No workers" warning); no
 * job is added by hand.
 */

import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import type {
  JobCleanStatus,
  JobCounts,
  JobState,
  JobStatus,
  QueueJob,
  QueueJobJson,
  QueueWorker,
  Status,
} from '@bull-board/api/typings/app';
import type { Job } from 'bullmq';
import type { AttemptRecord, DeadLetter } from '../shared/job.ts';
import type { DeadLetterQueue, LlmqQueue } from '../shared/queues.ts';
import { forgetDeadLetter } from '../worker/dead-letter-bounds.ts';
import { purgeDeadLetters, retryDeadLetter } from '../worker/dead-letters.ts';
import { refused } from './board-adapters.ts';

/** One try, as a line of the letter's error details. */
function attemptLine(a: AttemptRecord, i: number): string {
  const what = [a.outcome, a.status, a.errorClass, a.message].filter((x) => x !== undefined);
  return `try ${i + 1} at ${new Date(a.at).toISOString()}: ${what.join(' ')}`;
}

/** A letter as Bull Board shows a failed job: its reason, its tries, when it died. */
class LetterJob implements QueueJob {
  constructor(
    private readonly job: Job<DeadLetter>,
    private readonly dead: DeadLetterQueue,
    private readonly queue: LlmqQueue,
  ) {}

  get opts() {
    return this.job.opts;
  }

  toJSON(): QueueJobJson {
    const d = this.job.data;
    const cause = [d.errorClass, d.status, d.providerType].filter((x) => x !== undefined);
    return {
      ...this.job.toJSON(),
      failedReason: d.reason,
      // Bull Board shows the stack last line first: the reason, its cause, the tries back.
      stacktrace: [...d.attempts.map(attemptLine), cause.join(' '), d.reason],
      // Its timeline: enqueued, its last try, dead.
      timestamp: d.data.enqueuedAt ?? this.job.timestamp,
      processedOn: d.attempts.at(-1)?.at ?? this.job.processedOn ?? null,
      finishedOn: d.deadAt,
      attemptsMade: d.attempts.length,
    };
  }

  getState(): Promise<JobState> {
    return Promise.resolve('failed');
  }

  async retry(): Promise<void> {
    const id = await retryDeadLetter(this.dead, this.queue, this.job.id!);
    if (id === undefined) throw refused(404, `dead letter ${this.job.id} is gone`);
  }

  async remove(): Promise<void> {
    await this.job.remove();
    await forgetDeadLetter(this.dead, this.job.id!);
  }

  updateData(): Promise<void> {
    return Promise.reject(
      refused(
        400,
        'a dead letter records what failed: retry it, or enqueue a corrected request; its data stays as it was',
      ),
    );
  }

  promote(): Promise<void> {
    return Promise.reject(refused(400, 'a dead letter is not delayed: retry it instead'));
  }
}

const NO_JOBS: JobCounts = {
  active: 0,
  completed: 0,
  delayed: 0,
  failed: 0,
  paused: 0,
  prioritized: 0,
  waiting: 0,
  'waiting-children': 0,
};

export class DeadLetterAdapter extends BullMQAdapter {
  constructor(
    private readonly dead: DeadLetterQueue,
    private readonly main: LlmqQueue,
    options: ConstructorParameters<typeof BullMQAdapter>[1],
  ) {
    super(dead, options);
  }

  override addJob(): Promise<Job> {
    return Promise.reject(
      refused(
        400,
        'dead letters are made by workers: add the request to the queue, or retry a dead letter (llmq dlq retry)',
      ),
    );
  }

  /** Letters wait in BullMQ's wait list of this queue; Bull Board shows them as failed. */
  override async getJobCounts(): Promise<JobCounts> {
    const letters = await this.dead.getJobCountByTypes('wait');
    return { ...NO_JOBS, failed: letters };
  }

  override getStatuses(): Status[] {
    return ['latest', 'failed'];
  }

  override getJobStatuses(): JobStatus[] {
    return ['failed'];
  }

  override async getJobs(statuses: JobStatus[], start = 0, end = -1): Promise<Job[]> {
    if (!statuses.includes('failed')) return [];
    const jobs = await this.dead.getJobs(['wait'], start, end);
    return jobs.filter(Boolean).map((j) => this.letter(j)) as unknown as Job[];
  }

  override async getJob(id: string): Promise<Job | undefined> {
    const job = await this.dead.getJob(id);
    return job ? (this.letter(job) as unknown as Job) : undefined;
  }

  /** The job's own history (the worker's lines), kept with the failed job in its queue. */
  override async getJobLogs(id: string): Promise<string[]> {
    return (await this.main.getJobLogs(id)).logs;
  }

  /** Cleaning failed letters purges those older than the grace time, as `llmq dlq purge` does. */
  override async clean(status: JobCleanStatus, graceTimeMs: number): Promise<void> {
    if (status === 'failed') await purgeDeadLetters(this.dead, graceTimeMs);
  }

  /** Nobody consumes dead letters: "unknown", so Bull Board warns of no missing worker. */
  override getWorkers(): Promise<QueueWorker[] | null> {
    return Promise.resolve(null);
  }

  private letter(job: Job<DeadLetter>): LetterJob {
    return new LetterJob(job, this.dead, this.main);
  }
}
