import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import type { QueueNames } from '../shared/keys.ts';
import { isCluster, type RedisClient } from '../shared/redis.ts';
import { HeadPeeker, markerKey } from './bullmq-internals.ts';
import type { HeadJob } from './head-job.ts';

const noHeads = Promise.resolve(undefined);

/** Extra time a blocking pop gets before it is given up as stuck (a dropped connection). */
const STUCK_MS = 1_000;

/**
 * The idle gate's wait for work. BullMQ keeps a marker, the sorted set `<prefix>:<queue>:marker`:
 * every script that makes a job ready (add, retry, promote, stalled recovery, resume, moveToWait,
 * moveToActive) writes member `0` at score 0, and the delayed scripts write member `1` at the
 * next delayed job's due time (ms). BullMQ's own workers block on it with BZPOPMIN; so does this,
 * on a connection of its own. llmq fetches with moveToActive, which never reads the marker, so
 * popping it takes nothing from BullMQ. A peek at the queue's head goes behind each pop on the
 * same connection: Redis runs it the moment the pop returns, so a woken gate has its first
 * peek without a round trip of its own.
 */
export class MarkerWait {
  private readonly conn: Redis;
  private readonly key: string;
  private readonly peeker: HeadPeeker;
  /** The due time of the next delayed job, as a popped `1` marker told (ms, the worker's clock). */
  private dueAt = Number.POSITIVE_INFINITY;

  constructor(
    redis: RedisClient,
    names: QueueNames,
    private readonly clock: () => number = Date.now,
  ) {
    // Named for CLIENT LIST: which queue's worker is idle.
    const name = `llmq:idle:${names.queue}`.replace(/[^\w:.{}-]/g, '_');
    // (A Cluster's duplicate takes other arguments: it goes unnamed.)
    this.conn = (
      isCluster(redis) ? redis.duplicate() : redis.duplicate({ connectionName: name })
    ) as Redis;
    this.conn.on('error', () => {});
    this.key = markerKey(names);
    this.peeker = new HeadPeeker(this.conn, names, clock);
  }

  /**
   * Resolves once a job may be ready: a marker arrived, a delayed job fell due, `maxMs` passed
   * (a safety net for a marker another worker popped), or `signal` aborted. When a marker woke
   * it, with the first `peek` jobs BullMQ would hand out next, as of that moment (none peeked
   * when `peek` is 0). `behind` sends
   * more behind each pop on its connection (Redis runs it as the pop returns).
   */
  async wait(
    maxMs: number,
    signal: AbortSignal,
    peek = 1,
    behind?: (conn: RedisClient) => void,
  ): Promise<HeadJob[] | undefined> {
    const end = this.clock() + maxMs;
    for (;;) {
      const now = this.clock();
      if (this.dueAt <= now) {
        this.dueAt = Number.POSITIVE_INFINITY;
        return;
      }
      const ms = Math.min(end, this.dueAt) - now;
      if (ms <= 0 || signal.aborted) return;
      let popped: [string, string, string] | null;
      let heads: Promise<HeadJob[] | undefined>;
      try {
        const pop = this.pop(ms, signal);
        heads = peek > 0 ? this.peeker.peekMany(peek).catch(() => undefined) : noHeads;
        behind?.(this.conn);
        popped = await pop;
      } catch {
        // The blocking connection failed: wait out the rest rather than spin.
        await sleep(ms, undefined, { signal }).catch(() => {});
        return;
      }
      if (!popped) continue;
      const [, member, score] = popped;
      const at = Number(score);
      // A `1` marker names when the next delayed job falls due: wake then, not now.
      if (member === '1' && at > this.clock()) {
        this.dueAt = Math.min(this.dueAt, at);
        continue;
      }
      return heads;
    }
  }

  /** One BZPOPMIN of at most `ms`, given up when stuck, or when `signal` aborts (the worker stops). */
  private async pop(ms: number, signal: AbortSignal): Promise<[string, string, string] | null> {
    const popped = this.conn.bzpopmin(this.key, Math.max(ms, 1) / 1_000);
    popped.catch(() => {});
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    const given = new Promise<null>((resolve) => {
      timer = setTimeout(() => resolve(null), ms + STUCK_MS);
      onAbort = () => {
        // Ends the blocking pop at once; the connection is not used again after a stop.
        this.conn.disconnect();
        resolve(null);
      };
      signal.addEventListener('abort', onAbort, { once: true });
    });
    try {
      return (await Promise.race([popped, given])) as [string, string, string] | null;
    } finally {
      clearTimeout(timer);
      if (onAbort) signal.removeEventListener('abort', onAbort);
    }
  }

  async close(): Promise<void> {
    await this.conn.quit().catch(() => this.conn.disconnect());
  }
}
