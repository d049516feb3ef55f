import { type ConnectionOptions, Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { DeadLetter, JobData, JobResult } from './job.ts';
import { bullPrefix, deadLetterQueueName, type QueueNames, queueRegistryKey } from './keys.ts';
import { bullmqTelemetry } from './telemetry/tracing.ts';

export type LlmqQueue = Queue<JobData, JobResult, string>;
export type DeadLetterQueue = Queue<DeadLetter, unknown, string>;

/** The BullMQ queue of llmq jobs. The connection is shared, not owned. */
export function openQueue(connection: ConnectionOptions, names: QueueNames): LlmqQueue {
  return new Queue<JobData, JobResult, string>(names.queue, {
    connection,
    prefix: bullPrefix(names),
    ...bullmqTelemetry(),
  });
}

/** The queue holding a queue's dead letters (nothing consumes it; people look at it). */
export function openDeadLetterQueue(
  connection: ConnectionOptions,
  names: QueueNames,
): DeadLetterQueue {
  return new Queue<DeadLetter, unknown, string>(deadLetterQueueName(names.queue), {
    connection,
    prefix: bullPrefix(names),
  });
}

/** Records a queue name under its prefix so the dashboard and status can find every queue. */
export async function registerQueue(redis: Redis, names: QueueNames): Promise<void> {
  await redis.sadd(queueRegistryKey(names.prefix), names.queue);
}

/** Every queue name registered under a prefix. */
export async function listQueues(redis: Redis, prefix: string): Promise<string[]> {
  return (await redis.smembers(queueRegistryKey(prefix))).sort();
}
