import type { Job } from 'bullmq';
import type { ChainableCommander } from 'ioredis';
import type { JobData, JobResult } from '../shared/job.ts';
import type { Line, LineAttempt } from '../shared/limiter/line.ts';
import type { Along } from '../shared/limiter/types.ts';
import { type Behind, defineLua, queueLua } from '../shared/lua-scripts.ts';
import type { RedisClient } from '../shared/redis.ts';
import {
  CAP,
  FRONT,
  frontCall,
  type GateWorker,
  LEFT_WAITING,
  MOVE_TO_ACTIVE,
} from './bullmq-internals.ts';

/** A job the acquire may admit: its id, and its tenant (for fair share's index). */
export type MayTake = { readonly id: string; readonly tenant?: string | undefined };

/** A fetch sent with the acquire: its lock token and the job it brought (undefined: none). */
export interface SentFetch {
  readonly token: string;
  readonly job: Promise<Job<JobData, JobResult> | undefined>;
}

/**
 * The gate's fetches, sent behind its acquire in one transaction (the limiter's `Along`): a
 * free slot becomes an active job in one round trip. One BullMQ moveToActive per job the acquire
 * may admit, between a cap (lua/cap-3.lua) that lets only the admitted ones hand out a job: a job
 * is still never taken before its budget. With fair share, the admitted jobs first go to the
 * front in their turn order (lua/front-3.lua): no other worker's fetch comes between. Behind
 * them, what was kept per waiting job goes for those taken (lua/leftWaiting-2.lua): no round
 * trip of its own.
 */
export class FetchAlong implements Behind {
  readonly fetches: SentFetch[];
  /** For the limiter's attempt: the ids it may admit, and the hash of its reservations. */
  readonly along: Along = (ids, reservations) => {
    this.ids = ids;
    this.reservations = reservations;
    return this;
  };
  private ids: readonly string[] = [];
  private reservations = '';
  private readonly moveKeys: string[];
  private readonly left: { keys: string[]; args: string[] };
  private readonly settle: ((raw: unknown) => void)[] = [];

  constructor(
    private readonly bull: GateWorker,
    private readonly heads: readonly MayTake[],
    nextToken: () => string,
    /** Fair share: the admitted jobs go to the front first, in the heads' order. */
    private readonly front = false,
  ) {
    this.moveKeys = bull.moveToActiveKeys;
    this.left = bull.leftWaitingCall(heads);
    this.fetches = heads.map(() => {
      const token = nextToken();
      const job = new Promise<unknown>((r) => this.settle.push(r)).then((raw) =>
        raw instanceof Error ? Promise.reject(raw) : this.bull.fromActive(raw, token),
      );
      job.catch(() => {});
      return { token, job };
    });
  }

  /** The cap's keys: BullMQ's meta and active, the limiter's reservations. */
  private get capKeys(): string[] {
    return [this.moveKeys[8]!, this.moveKeys[1]!, this.reservations];
  }

  /** The front's call: BullMQ's wait and prioritized, the limiter's reservations. */
  private get frontCall() {
    const [wait, , prioritized] = this.moveKeys;
    const jobs = this.ids.map((reservation, i) => ({ reservation, id: this.heads[i]!.id }));
    return frontCall({ wait: wait!, prioritized: prioritized!, res: this.reservations }, jobs);
  }

  prepare(redis: RedisClient): void {
    defineLua(redis, MOVE_TO_ACTIVE, this.moveKeys);
    defineLua(redis, CAP, this.capKeys);
    defineLua(redis, LEFT_WAITING, this.left.keys);
    if (this.front) defineLua(redis, FRONT, this.frontCall.keys);
  }

  queue(tx: ChainableCommander): void {
    const capKeys = this.capKeys;
    if (this.front) {
      const f = this.frontCall;
      queueLua(tx, FRONT, f.keys, f.args);
    }
    queueLua(tx, CAP, capKeys, ['open', ...this.ids]);
    for (const f of this.fetches) {
      queueLua(tx, MOVE_TO_ACTIVE, this.moveKeys, this.bull.moveToActiveArgs(f.token));
    }
    queueLua(tx, CAP, capKeys, ['close']);
    queueLua(tx, LEFT_WAITING, this.left.keys, this.left.args);
  }

  took(replies: readonly unknown[] | Error): void {
    // Before the fetches' replies: the front's (fair share), the cap's.
    const first = this.front ? 2 : 1;
    this.settle.forEach((settle, i) => {
      settle(replies instanceof Error ? replies : (replies[i + first] ?? null));
    });
  }

  /** The round will not take these jobs (its attempt failed): any fetched go back to wait. */
  abandon(): void {
    for (const f of this.fetches) f.job.then((job) => job?.moveToWait(f.token)).catch(() => {});
  }
}

/**
 * The round's fetches to send with its acquire, one per head it may admit (with fair share, behind
 * the admitted jobs' move to the front); none with results waiting to fetch with their
 * completions, or when a bench switch turned fetches along off (gate-paths.ts).
 */
export function fetchAlong(
  p: {
    bull: GateWorker;
    handoff: { hasWaiting: boolean };
    fair: unknown;
    paths: { fetchesAlong: boolean };
    nextToken(): string;
  },
  heads: readonly MayTake[],
): FetchAlong | undefined {
  if (!p.paths.fetchesAlong || p.handoff.hasWaiting) return undefined;
  return new FetchAlong(p.bull, heads, () => p.nextToken(), Boolean(p.fair));
}

/**
 * One attempt of `line` with `along`'s fetches behind its acquire (none when undefined): admitted,
 * with the fetches it sent; denied or failed, any job fetched goes back.
 */
export async function attemptAlong(
  line: Line,
  along: FetchAlong | undefined,
): Promise<LineAttempt & { readonly sent?: readonly SentFetch[] | undefined }> {
  const a = await line.attempt(along?.along).catch((err: unknown) => {
    along?.abandon();
    throw err;
  });
  if (!a.ok) along?.abandon();
  return a.ok ? { ...a, sent: along?.fetches } : a;
}
