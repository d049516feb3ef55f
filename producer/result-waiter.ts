import { setTimeout as sleep } from 'node:timers/promises';
import { QueueEvents } from 'bullmq';
import type { JobResult } from '../shared/job.ts';
import { bullPrefix, type QueueNames } from '../shared/keys.ts';
import {
  type DeadLetterQueue,
  type LlmqQueue,
  openDeadLetterQueue,
  openQueue,
} from '../shared/queues.ts';
import { duplicateRedis, type RedisClient } from '../shared/redis.ts';
import { JobFailedError, JobNotFoundError, WaitTimeoutError } from './errors.ts';
import { type JobStatus, readJobStatus } from './job-status.ts';

/**
 * How long `waitForResult` waits.
 *
 * @example
 * ```ts
 * const signal = AbortSignal.timeout(90_000);
 * const result = await producer.waitForResult(id, { timeout: 60_000, signal });
 * ```
 */
export interface WaitOptions {
  /** Give up after this many ms with a {@link WaitTimeoutError}; the job goes on. @default Infinity */
  readonly timeout?: number;
  /** Stop waiting when it aborts (the job goes on). */
  readonly signal?: AbortSignal;
}

export interface ResultWaiterOptions {
  readonly redis: RedisClient;
  readonly names: QueueNames;
  /** The queue to read; opened on `redis` when absent. */
  readonly queue?: LlmqQueue;
  readonly deadLetters?: DeadLetterQueue;
  /**
   * Every this many ms the waiter also checks each pending job itself, in one pipeline, in case
   * an event was missed (the event stream is trimmed; a connection can drop). @default 2_000
   */
  readonly sweepMs?: number;
}

/** The longest {@link ResultWaiter.close} waits for BullMQ's QueueEvents to close. */
const CLOSE_EVENTS_MS = 2_000;

interface Pending {
  readonly id: string;
  readonly resolve: (r: JobResult) => void;
  readonly reject: (e: Error) => void;
}

/**
 * Waits for jobs to finish: one QueueEvents subscription (its own blocking connection) serves
 * every waiter of the queue, and a slow sweep checks pending jobs directly so that a missed event
 * costs a delay, never a hang. No busy loop: waiters sleep on promises.
 */
export class ResultWaiter {
  private readonly redis: RedisClient;
  private readonly names: QueueNames;
  private readonly queue: LlmqQueue;
  private readonly deadLetters: DeadLetterQueue;
  private readonly ownsQueues: boolean;
  private readonly sweepMs: number;
  private readonly pending = new Map<string, Set<Pending>>();
  private events: Promise<QueueEvents> | undefined;
  /** The connections made for `events`, closed with the waiter. */
  private readonly eventsConns = new Set<RedisClient>();
  private sweepTimer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(options: ResultWaiterOptions) {
    this.redis = options.redis;
    this.names = options.names;
    this.ownsQueues = !options.queue;
    this.queue = options.queue ?? openQueue(this.redis, this.names);
    this.deadLetters = options.deadLetters ?? openDeadLetterQueue(this.redis, this.names);
    this.sweepMs = options.sweepMs ?? 2_000;
    if (this.ownsQueues) {
      this.queue.on('error', () => {});
      this.deadLetters.on('error', () => {});
    }
  }

  /**
   * Resolves with the job's result once it completes; rejects with {@link JobFailedError} (the
   * dead letter's reason) when it was dead-lettered, {@link JobNotFoundError} when there is no
   * such job (or it was removed meanwhile) and {@link WaitTimeoutError} after `timeout` ms.
   */
  async wait(id: string, options: WaitOptions = {}): Promise<JobResult> {
    if (this.closed) throw new Error('the result waiter is closed');
    options.signal?.throwIfAborted();
    await this.subscribe();
    return new Promise<JobResult>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const done = () => {
        clearTimeout(timer);
        options.signal?.removeEventListener('abort', onAbort);
        const set = this.pending.get(id);
        set?.delete(entry);
        if (set?.size === 0) this.pending.delete(id);
      };
      const entry: Pending = {
        id,
        resolve: (r) => {
          done();
          resolve(r);
        },
        reject: (e) => {
          done();
          reject(e);
        },
      };
      const onAbort = () => entry.reject(options.signal?.reason ?? new Error('aborted'));
      if (options.signal?.aborted) return onAbort();
      options.signal?.addEventListener('abort', onAbort, { once: true });
      const timeout = options.timeout ?? Number.POSITIVE_INFINITY;
      if (Number.isFinite(timeout))
        timer = setTimeout(() => entry.reject(new WaitTimeoutError(id, timeout)), timeout);
      const set = this.pending.get(id) ?? new Set<Pending>();
      this.pending.set(id, set);
      set.add(entry);
      this.scheduleSweep();
      // Subscribed first, then read: an event after this read is delivered, one before is seen.
      void this.check(id, true);
    });
  }

  /** Resolves once the event subscription is set up (rejects when Redis does not answer). */
  async ready(): Promise<void> {
    await this.subscribe();
  }

  /** Jobs someone is waiting for. */
  get waiting(): number {
    return this.pending.size;
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.sweepTimer);
    for (const set of this.pending.values()) {
      for (const p of set) p.reject(new Error('the result waiter was closed'));
    }
    const events = this.events;
    this.events = undefined;
    // Closing the subscription has been seen to wait forever after an outage (a batch command
    // done with every document never exited): it gets 2 s, then its connections are cut.
    await Promise.race([
      events?.then((e) => e.close()).catch(() => {}),
      sleep(CLOSE_EVENTS_MS, undefined, { ref: false }),
    ]);
    for (const c of this.eventsConns) c.disconnect();
    this.eventsConns.clear();
    if (this.ownsQueues) await Promise.all([this.queue.close(), this.deadLetters.close()]);
  }

  private subscribe(): Promise<QueueEvents> {
    this.events ??= (async () => {
      // Start reading right after the stream's current last entry, so nothing between now and
      // the first XREAD is lost.
      const eventsKey = `${bullPrefix(this.names)}:${this.names.queue}:events`;
      const last = (await this.redis.xrevrange(eventsKey, '+', '-', 'COUNT', 1))[0]?.[0] ?? '0-0';
      // Its own connection from the same settings (a Cluster's too); BullMQ needs retries
      // unbounded there, and its offline queue, whatever the caller's connection allows.
      const conn = duplicateRedis(this.redis, {
        node: { maxRetriesPerRequest: null, enableOfflineQueue: true },
      });
      conn.on('error', () => {});
      const events = new QueueEvents(this.names.queue, {
        connection: conn,
        prefix: bullPrefix(this.names),
        lastEventId: last,
      });
      events.on('error', () => {});
      this.eventsConns.add(conn);
      // The event carries the result only for a job removed on completion; a kept job holds
      // it (worker/bullmq-internals.ts, completionOf) and is read.
      events.on('completed', ({ jobId, returnvalue }) => {
        const set = this.pending.get(jobId);
        if (!set) return;
        const result = (
          typeof returnvalue === 'string' ? JSON.parse(returnvalue) : returnvalue
        ) as JobResult | null;
        if (result === null) void this.check(jobId, false);
        else for (const p of [...set]) p.resolve(result);
      });
      events.on('failed', ({ jobId }) => {
        if (this.pending.has(jobId)) void this.check(jobId, false);
      });
      events.on('removed', ({ jobId }) => {
        if (this.pending.has(jobId)) void this.check(jobId, false);
      });
      return events;
    })();
    const current = this.events;
    // A failed start is not cached: the next wait tries again.
    current.catch(() => {
      if (this.events === current) this.events = undefined;
    });
    return current;
  }

  private async check(id: string, first: boolean): Promise<void> {
    let status: JobStatus | null;
    try {
      status = await readJobStatus(this.queue, this.deadLetters, id);
    } catch {
      return; // Redis hiccup: the sweep tries again.
    }
    const set = this.pending.get(id);
    if (!set) return;
    if (status === null) {
      const detail = first ? 'no such job' : 'the job was removed while waiting for it';
      for (const p of [...set]) p.reject(new JobNotFoundError(id, detail));
    } else if (status.state === 'completed') {
      for (const p of [...set]) p.resolve(status.result);
    } else if (status.state === 'failed') {
      for (const p of [...set])
        p.reject(new JobFailedError(id, status.error.reason, status.deadLetter));
    }
  }

  private scheduleSweep(): void {
    if (this.sweepTimer || this.closed) return;
    this.sweepTimer = setTimeout(() => {
      this.sweepTimer = undefined;
      void this.sweep().finally(() => {
        if (this.pending.size > 0) this.scheduleSweep();
      });
    }, this.sweepMs);
    this.sweepTimer.unref();
  }

  /** One pipeline asks, for every pending job, whether it finished or vanished; only those are read. */
  private async sweep(): Promise<void> {
    const ids = [...this.pending.keys()];
    const base = `${bullPrefix(this.names)}:${this.names.queue}`;
    for (let i = 0; i < ids.length; i += 1_000) {
      const batch = ids.slice(i, i + 1_000);
      const pipe = this.redis.pipeline();
      for (const id of batch) {
        pipe.zscore(`${base}:completed`, id);
        pipe.zscore(`${base}:failed`, id);
        pipe.exists(`${base}:${id}`);
      }
      let replies: [Error | null, unknown][] | null;
      try {
        replies = await pipe.exec();
      } catch {
        return;
      }
      if (!replies) return;
      const settled = batch.filter((_, j) => {
        const [completed, failed, exists] = [
          replies[3 * j]?.[1],
          replies[3 * j + 1]?.[1],
          replies[3 * j + 2]?.[1],
        ];
        return completed !== null || failed !== null || exists === 0;
      });
      await Promise.all(settled.map((id) => this.check(id, false)));
    }
  }
}

/**
 * Waits for one job's result without a producer: opens what it needs on `redis` and closes it
 * after. A process waiting for many jobs should keep one {@link ResultWaiter} (or a Producer).
 */
export async function waitForJobResult(
  target: { readonly redis: RedisClient; readonly names: QueueNames },
  id: string,
  options: WaitOptions = {},
): Promise<JobResult> {
  const waiter = new ResultWaiter(target);
  try {
    return await waiter.wait(id, options);
  } finally {
    await waiter.close();
  }
}
