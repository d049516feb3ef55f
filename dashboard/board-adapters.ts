/**
 * Bull Board's adapters for llmq's queues. Adding a job goes through the producer: the request
 * is validated and costed like any other, and a bad one is refused with its field. A job that
 * was dead-lettered stays failed in its queue (whoever holds its id still finds it, with its
 * history), but Bull Board shows it once, among the dead letters (`dead-letter-adapter.ts`);
 * the queue's failed jobs are those without a letter. Data edited in Bull Board is stored with
 * its times and credentials as the job had them (`job-display.ts`).
 */

import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import type { JobCounts, JobStatus, QueueJobOptions } from '@bull-board/api/typings/app';
import { Job } from 'bullmq';
import type { Producer } from '../producer/producer.ts';
import { LlmqError } from '../shared/errors.ts';
import type { JobData, JobResult } from '../shared/job.ts';
import { bullPrefix, deadLetterQueueName, type QueueNames } from '../shared/keys.ts';
import { loadLuaScripts, runLuaReadOnly } from '../shared/lua-scripts.ts';
import type { LlmqQueue } from '../shared/queues.ts';
import type { RedisClient } from '../shared/redis.ts';
import { readStoredResult } from '../shared/result-codec.ts';
import { restoreEdited } from './job-display.ts';

const SCRIPTS = loadLuaScripts(new URL('./lua', import.meta.url).pathname);

/** An error Bull Board answers with its status (its error handler reads `statusCode`). */
export function refused(status: number, message: string): Error {
  return Object.assign(new Error(message), { statusCode: status });
}

type Options = ConstructorParameters<typeof BullMQAdapter>[1];

/** The main queue: "add job" takes a Messages request as the job's data, `priority` from its options. */
export class QueueAdapter extends BullMQAdapter {
  private readonly failedKey: string;
  private readonly lettersPrefix: string;

  constructor(
    private readonly llmqQueue: LlmqQueue,
    private readonly redis: RedisClient,
    names: QueueNames,
    private readonly producer: () => Producer,
    options: Options,
  ) {
    super(llmqQueue, options);
    // A long answer is stored deflated: shown as the result it is.
    this.setFormatter('returnValue', readStoredResult);
    this.failedKey = `${bullPrefix(names)}:${names.queue}:failed`;
    this.lettersPrefix = `${bullPrefix(names)}:${deadLetterQueueName(names.queue)}:`;
  }

  override async addJob(_name: string, data: unknown, options: QueueJobOptions): Promise<Job> {
    const priority = (options as { priority?: unknown } | undefined)?.priority;
    let id: string;
    try {
      id = await this.producer().enqueue(data, {
        ...(typeof priority === 'number' || typeof priority === 'string' ? { priority } : {}),
      });
    } catch (err) {
      if (err instanceof LlmqError && err.code !== 'REDIS_UNAVAILABLE')
        throw refused(400, `the job's data must be a Messages request: ${err.message}`);
      throw err;
    }
    const job = (await this.getJob(id)) as Job | undefined;
    if (!job) throw refused(409, `job ${id} was added and is already gone`);
    return job;
  }

  /** How many failed jobs have no dead letter, and the ids of those from `start` to `stop`. */
  private async unlettered(start: number, stop: number): Promise<{ count: number; ids: string[] }> {
    const reply = (await runLuaReadOnly(
      this.redis,
      SCRIPTS['unlettered']!,
      [this.failedKey],
      [this.lettersPrefix, start, stop],
    )) as [number, ...string[]];
    const [count, ...ids] = reply;
    return { count, ids };
  }

  override async getJobCounts(): Promise<JobCounts> {
    const [counts, failed] = await Promise.all([super.getJobCounts(), this.unlettered(1, 0)]);
    return { ...counts, failed: failed.count };
  }

  override async getJobs(statuses: JobStatus[], start = 0, end = -1): Promise<Job[]> {
    if (!statuses.includes('failed')) return super.getJobs(statuses, start, end);
    const others = statuses.filter((s) => s !== 'failed');
    const [rest, failed] = await Promise.all([
      others.length > 0 ? super.getJobs(others, start, end) : Promise.resolve([]),
      this.unlettered(start, end),
    ]);
    const jobs = await Promise.all(failed.ids.map((id) => Job.fromId(this.llmqQueue, id)));
    return [...rest, ...jobs.filter((j): j is Job => j !== undefined)];
  }

  override async getJob(id: string): Promise<Job | undefined> {
    const job = (await super.getJob(id)) as Job<JobData, JobResult> | undefined;
    if (!job) return undefined;
    // Bull Board's "update data" sends the data as it showed it: times and secrets go back.
    const update = job.updateData.bind(job);
    job.updateData = (data: JobData) => update(restoreEdited(data, job.data) as JobData);
    return job as Job;
  }
}
