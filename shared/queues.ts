import { type ConnectionOptions, Queue } from 'bullmq';
import type { DeadLetter, JobData, JobResult } from './job.ts';
import { bullPrefix, deadLetterQueueName, type QueueNames, queueRegistryKey } from './keys.ts';
import type { RedisClient } from './redis.ts';

export type LlmqQueue = Queue<JobData, JobResult, string>;
export type DeadLetterQueue = Queue<DeadLetter, unknown, string>;

/** The BullMQ queue of llmq jobs. The connection is shared, not owned. */
export function openQueue(connection: ConnectionOptions, names: QueueNames): LlmqQueue {
  return new Queue<JobData, JobResult, string>(names.queue, {
    connection,
    prefix: bullPrefix(names),
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
export async function registerQueue(redis: RedisClient, names: QueueNames): Promise<void> {
  await redis.sadd(queueRegistryKey(names.prefix), names.queue);
}

/** Every queue name registered under a prefix. */
export async function listQueues(redis: RedisClient, prefix: string): Promise<string[]> {
  return (await redis.smembers(queueRegistryKey(prefix))).sort();
}
