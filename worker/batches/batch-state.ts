import { batchesKey, type QueueNames } from '../../shared/keys.ts';
import type { RedisClient } from '../../shared/redis.ts';

/** A submitted batch, kept in Redis until its results were applied. */
export interface InFlight {
  readonly batchId: string;
  readonly jobIds: readonly string[];
  readonly submittedAt: number;
  /** The deployment of the pool it went to (absent without a pool). */
  readonly deployment?: string | undefined;
}

/** Counters of a queue's batches since it began (cumulative across runs). */
export interface BatchTotals {
  readonly batches: number;
  readonly batchesEnded: number;
  readonly items: number;
  readonly succeeded: number;
  readonly errored: number;
  readonly expired: number;
  readonly canceled: number;
  readonly retried: number;
  readonly deadLettered: number;
  /** Jobs sent through `messages` because batches again would miss their deadline. */
  readonly handedOff: number;
  /** Dollars the succeeded items saved against the same calls through `messages`. */
  readonly savedUsd: number;
}

export type TotalsField = Exclude<keyof BatchTotals, 'savedUsd' | 'handedOff'>;

/**
 * The batch submitter's Redis state of one queue: the batches in flight by id (written right
 * after the provider accepted one, removed once its results were applied), the totals, and the
 * lease that keeps a second submitter from running beside the first.
 */
export class BatchState {
  constructor(
    private readonly redis: RedisClient,
    private readonly names: QueueNames,
  ) {}

  async inFlight(): Promise<InFlight[]> {
    const all = await this.redis.hgetall(batchesKey(this.names, 'inflight'));
    return Object.values(all)
      .map((v) => JSON.parse(v) as InFlight)
      .sort((a, b) => a.submittedAt - b.submittedAt);
  }

  async submitted(b: InFlight): Promise<void> {
    await this.redis
      .multi()
      .hset(batchesKey(this.names, 'inflight'), b.batchId, JSON.stringify(b))
      .hincrby(batchesKey(this.names, 'totals'), 'batches', 1)
      .hincrby(batchesKey(this.names, 'totals'), 'items', b.jobIds.length)
      .exec();
  }

  async ended(batchId: string): Promise<void> {
    await this.redis
      .multi()
      .hdel(batchesKey(this.names, 'inflight'), batchId)
      .hincrby(batchesKey(this.names, 'totals'), 'batchesEnded', 1)
      .exec();
  }

  /** Jobs handed to `messages` (past their deadline), waiting for that job's outcome. */
  async handoffs(): Promise<string[]> {
    return this.redis.smembers(batchesKey(this.names, 'handoffs'));
  }

  async handedOff(jobId: string): Promise<void> {
    await this.redis
      .multi()
      .sadd(batchesKey(this.names, 'handoffs'), jobId)
      .hincrby(batchesKey(this.names, 'totals'), 'handedOff', 1)
      .exec();
  }

  async handoffSettled(jobId: string): Promise<void> {
    await this.redis.srem(batchesKey(this.names, 'handoffs'), jobId);
  }

  async count(field: TotalsField, savedUsd = 0): Promise<void> {
    const m = this.redis.multi().hincrby(batchesKey(this.names, 'totals'), field, 1);
    if (savedUsd > 0) m.hincrbyfloat(batchesKey(this.names, 'totals'), 'savedUsd', savedUsd);
    await m.exec();
  }

  async totals(): Promise<BatchTotals> {
    const raw = await this.redis.hgetall(batchesKey(this.names, 'totals'));
    const n = (k: string) => Number(raw[k] ?? 0);
    return {
      batches: n('batches'),
      batchesEnded: n('batchesEnded'),
      items: n('items'),
      succeeded: n('succeeded'),
      errored: n('errored'),
      expired: n('expired'),
      canceled: n('canceled'),
      retried: n('retried'),
      deadLettered: n('deadLettered'),
      handedOff: n('handedOff'),
      savedUsd: n('savedUsd'),
    };
  }

  /** Takes or renews the lease; false while another submitter holds it. */
  async holdLease(owner: string, ttlMs: number): Promise<boolean> {
    const key = batchesKey(this.names, 'lease');
    const set = await this.redis.set(key, owner, 'PX', ttlMs, 'NX');
    if (set === 'OK') return true;
    if ((await this.redis.get(key)) !== owner) return false;
    await this.redis.pexpire(key, ttlMs);
    return true;
  }

  async releaseLease(owner: string): Promise<void> {
    const key = batchesKey(this.names, 'lease');
    if ((await this.redis.get(key)) === owner) await this.redis.del(key);
  }
}
