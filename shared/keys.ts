/**
 * Every Redis key llmq writes is built here. All keys of one queue (BullMQ's, the dead letters'
 * and the limiter's) share one Redis Cluster hash tag, `{queue}`, so the same code runs on one
 * Redis and on a cluster.
 */

/**
 * Which queue: every key of it starts with `prefix`; `queue` is BullMQ's queue name. Producers,
 * workers and the dashboard of one queue use the same two.
 *
 * @example
 * ```ts
 * const names: QueueNames = { prefix: config.prefix, queue: config.queue }; // 'llmq', 'llmq'
 * ```
 */
export interface QueueNames {
  /** The first part of every Redis key. @default 'llmq' (Config.prefix) */
  readonly prefix: string;
  /** The queue's name. @default 'llmq' (Config.queue) */
  readonly queue: string;
}

/** The BullMQ `prefix` option for a queue: its hash tag is the queue's name. */
export function bullPrefix({ prefix, queue }: QueueNames): string {
  return `${prefix}:{${queue}}`;
}

/** The BullMQ queue holding a queue's dead letters. */
export function deadLetterQueueName(queue: string): string {
  return `${queue}-dead`;
}

/** The key of one of llmq's own structures of a queue (`llmq:{jobs}:limiter:win`). */
export function llmqKey(names: QueueNames, ...parts: string[]): string {
  return [bullPrefix(names), ...parts].join(':');
}

/** Fair share's count: tenant -> tokens per weight served, '|clock' -> the last pick's (HASH). */
export function fairServedKey(names: QueueNames): string {
  return llmqKey(names, 'fair');
}

/**
 * Fair share's index of the tenants with waiting jobs (ZSET tenant -> tokens per weight
 * served), kept by producers' adds and the fair gate's charges.
 */
export function fairTenantsKey(names: QueueNames): string {
  return llmqKey(names, 'fair', 'tenants');
}

/**
 * Fair share's index of a tenant's waiting jobs (ZSET job id -> BullMQ's prioritized score);
 * with no tenant, the prefix the scripts append a tenant's name to.
 */
export function fairJobsKey(names: QueueNames, tenant = ''): string {
  return `${llmqKey(names, 'fair', 'jobs')}:${tenant}`;
}

/**
 * The registry of queue names known under a prefix (used by the dashboard and status). Its own
 * hash tag: on a Cluster it lives in one slot, and is never written with a queue's keys.
 */
export function queueRegistryKey(prefix: string): string {
  return `${prefix}:{queues}`;
}

/** Where releases before Cluster support kept the registry; read until every queue registers again. */
export function legacyQueueRegistryKey(prefix: string): string {
  return `${prefix}:queues`;
}

/**
 * The sizes of a queue's waiting jobs (job id -> bytes, ':total' -> their sum), or a tenant's:
 * written by the producer's depth gate, forgotten as each job leaves waiting.
 */
export function depthSizesKey(names: QueueNames, tenant?: string): string {
  return tenant === undefined
    ? llmqKey(names, 'depth', 'sizes')
    : llmqKey(names, 'depth', 'tenant-sizes', tenant);
}

/** The circuit breaker's hash of a queue (state, failures, open_until). */
export function breakerKey(names: QueueNames, deployment?: string): string {
  return deployment === undefined
    ? llmqKey(names, 'breaker')
    : llmqKey(names, 'breaker', 'deployment', deployment);
}

/** The BullMQ queue holding a queue's jobs bound for Message Batches (never seen by the gate). */
export function batchQueueName(queue: string): string {
  return `${queue}-batches`;
}

/** A key of the batch submitter's state of a queue (`inflight`, `handoffs`, `totals`, `lease`). */
export function batchesKey(
  names: QueueNames,
  part: 'inflight' | 'handoffs' | 'totals' | 'lease',
): string {
  return llmqKey(names, 'batches', part);
}

/** A job's relayed stream events (a Redis stream, capped and expiring), read by the gateway. */
export function jobEventsKey(names: QueueNames, jobId: string): string {
  return llmqKey(names, 'sse', jobId);
}

/** The fleet's configured limits of a queue (one JSON string; see shared/fleet-limits.ts). */
export function fleetLimitsKey(names: QueueNames): string {
  return llmqKey(names, 'limits');
}

/**
 * Failed authentications from one address, shared by every `llmq serve` under a prefix. Its
 * own hash tag: no queue's keys are written with it.
 */
export function authFailuresKey(prefix: string, address: string): string {
  return `${prefix}:{auth}:${address}`;
}

/** The worker processes of a queue that are running: id -> present until (Redis time, ms). */
/** The queue's stamp: the newest job format written to it, and the builds that used it. */
export function queueStampKey(names: QueueNames): string {
  return llmqKey(names, 'stamp');
}

export function workersKey(names: QueueNames): string {
  return llmqKey(names, 'workers');
}

/**
 * A key of a queue's usage history (`tier:<n>`: one hash of downsampled buckets per range,
 * `tenants` / `models`: the labels it keeps, `jobs`: each tenant's latest jobs).
 */
export function historyKey(names: QueueNames, part: string): string {
  return llmqKey(names, 'history', part);
}

/** What a model's PDF pages cost at the provider, as learned (a list of per-page costs, newest first). */
export function pageCostsKey(names: QueueNames, model: string): string {
  return llmqKey(names, 'page-costs', model);
}
