/**
 * Bull Board's adapters for llmq's queues. Adding a job goes through the producer: the request
 * is validated and costed like any other, and a bad one is refused with its field; the dead
 * letters take no new jobs (a dead letter is made by a worker, retried with `llmq dlq retry`).
 */

import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import type { QueueJobOptions } from '@bull-board/api/typings/app';
import type { Job } from 'bullmq';
import type { Producer } from '../producer/producer.ts';
import { LlmqError } from '../shared/errors.ts';
import type { DeadLetterQueue, LlmqQueue } from '../shared/queues.ts';

/** An error Bull Board answers with its status (its error handler reads `statusCode`). */
function refused(status: number, message: string): Error {
  return Object.assign(new Error(message), { statusCode: status });
}

/** The main queue: "add job" takes a Messages request as the job's data, `priority` from its options. */
export class QueueAdapter extends BullMQAdapter {
  constructor(
    queue: LlmqQueue,
    private readonly producer: () => Producer,
    options: ConstructorParameters<typeof BullMQAdapter>[1],
  ) {
    super(queue, options);
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
}

/** The dead letters: no job is added by hand. */
export class DeadLetterAdapter extends BullMQAdapter {
  constructor(queue: DeadLetterQueue, options: ConstructorParameters<typeof BullMQAdapter>[1]) {
    super(queue, options);
  }

  override addJob(): Promise<Job> {
    return Promise.reject(
      refused(
        400,
        'dead letters are made by workers: add the request to the queue, or retry a dead letter (llmq dlq retry)',
      ),
    );
  }
}
