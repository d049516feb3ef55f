import { type ConnectionOptions, Queue } from 'bullmq';
import type { DeadLetter, JobData, JobResult } from './job.ts';
import {
  batchQueueName,
  bullPrefix,
  deadLetterQueueName,
  legacyQueueRegistryKey,
  llmqKey,
  type QueueNames,
  queueRegistryKey,
} from './keys.ts';
import type { RedisClient } from './redis.ts';
import { deleteKeysMatching } from './redis.ts';
import { bullmqTelemetry } from './telemetry/tracing.ts';

export type LlmqQueue = Queue<JobData, JobResult, string>;
export type DeadLetterQueue = Queue<DeadLetter, unknown, string>;

/** How a queue is opened: `read` for a reader, which must not write (BullMQ's `meta` otherwise). */
export interface OpenOptions {
  readonly read?: boolean;
}

/**
 * Connection trouble reaches each caller as the error of its own command; a queue's `error`
 * event without a listener would have BullMQ print each one with its stack.
 */
function quiet<Q extends Queue>(queue: Q): Q {
  queue.on('error', () => {});
  return queue;
}

/** The names of a queue opened by {@link openQueue} (its BullMQ prefix is `<prefix>:{<queue>}`). */
export function queueNamesOf(queue: {
  readonly name: string;
  readonly opts: { prefix?: string };
}): QueueNames {
  const tag = `:{${queue.name}}`;
  const full = queue.opts.prefix ?? '';
  if (!full.endsWith(tag))
    throw new Error(`queue ${queue.name} was not opened by llmq (prefix ${full})`);
  return { prefix: full.slice(0, -tag.length), queue: queue.name };
}

/** The BullMQ queue of llmq jobs. The connection is shared, not owned. */
export function openQueue(
  connection: ConnectionOptions,
  names: QueueNames,
  options: OpenOptions = {},
): LlmqQueue {
  return quiet(
    new Queue<JobData, JobResult, string>(names.queue, {
      connection,
      prefix: bullPrefix(names),
      ...(options.read ? { skipMetasUpdate: true } : {}),
      ...bullmqTelemetry(),
    }),
  );
}

/** The queue holding a queue's dead letters (nothing consumes it; people look at it). */
export function openDeadLetterQueue(
  connection: ConnectionOptions,
  names: QueueNames,
  options: OpenOptions = {},
): DeadLetterQueue {
  return quiet(
    new Queue<DeadLetter, unknown, string>(deadLetterQueueName(names.queue), {
      connection,
      prefix: bullPrefix(names),
      ...(options.read ? { skipMetasUpdate: true } : {}),
    }),
  );
}

/** The names of a queue's batch-bound jobs: the same prefix (and hash tag), `<queue>-batches`. */
export function batchNames(names: QueueNames): QueueNames {
  return { prefix: names.prefix, queue: batchQueueName(names.queue) };
}

/** The BullMQ queue of a queue's batch-bound jobs (the connection is shared, not owned). */
export function openBatchQueue(redis: RedisClient, names: QueueNames): LlmqQueue {
  const b = batchNames(names);
  const q = new Queue<JobData, JobResult, string>(b.queue, {
    connection: redis,
    prefix: bullPrefix(b),
  });
  q.on('error', () => {});
  return q;
}

/** Records a queue name under its prefix so the dashboard and status can find every queue. */
export async function registerQueue(redis: RedisClient, names: QueueNames): Promise<void> {
  await redis.sadd(queueRegistryKey(names.prefix), names.queue);
}

/**
 * Every queue name registered under a prefix, including those whose keys are gone. Workers
 * register again when Redis comes back, so a registration a failover lost returns.
 */
export async function listRegisteredQueues(redis: RedisClient, prefix: string): Promise<string[]> {
  // Two reads, not SUNION: on a Cluster the two keys may live on different masters.
  const [now, legacy] = await Promise.all([
    redis.smembers(queueRegistryKey(prefix)),
    redis.smembers(legacyQueueRegistryKey(prefix)),
  ]);
  return [...new Set([...now, ...legacy])].sort();
}

/**
 * Keys that exist while a queue has held jobs or dead letters, or a worker has published its
 * limits; when none is left (obliterated, deleted, flushed), the queue is gone. Not BullMQ's
 * `meta`, which merely opening a queue writes.
 */
function traceKeys(names: QueueNames): string[] {
  const main = `${bullPrefix(names)}:${names.queue}`;
  const dead = `${bullPrefix(names)}:${deadLetterQueueName(names.queue)}`;
  return [
    `${main}:id`,
    `${main}:events`,
    `${dead}:id`,
    `${dead}:events`,
    llmqKey(names, 'limiter', 'config'),
  ];
}

/**
 * The registered queues that still have keys (`live`), and those whose keys are gone: a read,
 * it removes nothing (`forgetQueue` does, when asked).
 */
export async function listQueueNames(
  redis: RedisClient,
  prefix: string,
): Promise<{ readonly live: string[]; readonly gone: string[] }> {
  const all = await listRegisteredQueues(redis, prefix);
  // One EXISTS per queue: its keys share one hash tag, so this works on a cluster too.
  const found = await Promise.all(
    all.map((queue) => redis.exists(...traceKeys({ prefix, queue }))),
  );
  return { live: all.filter((_, i) => found[i]! > 0), gone: all.filter((_, i) => found[i] === 0) };
}

/** Every registered queue under a prefix whose keys are still there. */
export async function listQueues(redis: RedisClient, prefix: string): Promise<string[]> {
  return (await listQueueNames(redis, prefix)).live;
}

/**
 * Takes a queue out of the registry and deletes what is left of its keys. The caller checks
 * that it is empty first; a producer or worker using it registers it again.
 */
export async function forgetQueue(redis: RedisClient, names: QueueNames): Promise<void> {
  await redis.srem(queueRegistryKey(names.prefix), names.queue);
  await redis.srem(legacyQueueRegistryKey(names.prefix), names.queue);
  await deleteKeysMatching(redis, `${bullPrefix(names).replace(/[*?[\]\\]/g, '\\$&')}:*`);
}
