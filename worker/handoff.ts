import { setTimeout as sleep } from 'node:timers/promises';
import type { Job } from 'bullmq';
import type { JobData, JobResult } from '../shared/job.ts';
import type { GateWorker, LateCompletion } from './bullmq-internals.ts';

/**
 * A job whose call has ended; `ended` frees its slot while its result waits to be stored. Its
 * `token` is its lock's: a job this worker took again (its lock had lapsed) keeps its one call,
 * under the new lock.
 */
export interface Finishing {
  readonly job: Job<JobData, JobResult>;
  token: string;
  ended?: boolean;
}

/** BullMQ's answers to a completion whose lock lapsed: no lock, another's, not active. */
const LOCK_LOST: ReadonlySet<unknown> = new Set([-2, -3, -6]);

/** Whether a completion failed because the job's lock had lapsed. */
export const lockLost = (err: unknown): boolean =>
  LOCK_LOST.has((err as { code?: unknown } | undefined)?.code);

/** How long, at most, a late completion waits for this worker's own fetch of its job to land. */
const OWN_FETCH_WAIT_MS = 2_000;

/**
 * A job whose call succeeded, waiting for the gate to reserve budget for the next job so that its
 * completion fetches that job in the same command. Waits at most `waitMs`.
 */
export interface WaitingCompletion {
  readonly r: Finishing;
  readonly result: JobResult;
  readonly timer: NodeJS.Timeout;
  readonly done: (err?: unknown) => void;
}

/**
 * The completion handoff: a successful job's result is stored by the command that fetches the
 * gate's next job (one BullMQ command instead of two), or alone when the gate will not fetch soon.
 */
export class Handoff {
  private waiting: WaitingCompletion[] = [];
  /** The gate sleeps on an empty queue: no fetch is coming for a result to ride with. */
  private gateIdle = false;

  constructor(
    private readonly bull: GateWorker,
    /** The longest a result waits for the gate's next fetch. */
    private readonly waitMs: number,
    /** Called when a job's slot frees because its call ended. */
    private readonly onSlotFree: () => void,
    private readonly stopped: AbortSignal,
  ) {}

  /**
   * Stores a successful job's result. While the gate runs, the job waits (`waitMs` at most, and
   * not while the gate waits for budget) for the gate's next reservation, and its completion
   * fetches the job that reservation is for; its slot counts as free meanwhile. With `waitMs`
   * 0 (no completion fetches) the result is stored at once, its slot free all the same.
   */
  complete(r: Finishing, result: JobResult): Promise<void> {
    if (this.stopped.aborted || this.gateIdle)
      return this.bull.complete(r.job, result, r.token, false).then(() => {});
    if (this.waitMs <= 0) {
      this.slotFree(r);
      return this.bull.complete(r.job, result, r.token, false).then(() => {});
    }
    return new Promise<void>((resolve, reject) => {
      const w: WaitingCompletion = {
        r,
        result,
        timer: setTimeout(() => this.completeAlone([w]), this.waitMs),
        done: (err) => {
          if (err === undefined) resolve();
          else reject(err);
        },
      };
      this.waiting.push(w);
      // Free once it waits: the gate the slot wakes may fetch with it.
      this.slotFree(r);
    });
  }

  /** The call has ended: its slot is free while its result is stored (and its bookkeeping done). */
  private slotFree(r: Finishing): void {
    r.ended = true;
    this.onSlotFree();
  }

  /** While the gate sleeps on an empty queue, results are stored at once (none waits `waitMs`). */
  setGateIdle(idle: boolean): void {
    this.gateIdle = idle;
    if (idle) this.completeAlone();
  }

  /** Whether results wait for the gate's next fetch. */
  get hasWaiting(): boolean {
    return this.waiting.length > 0;
  }

  /** Takes up to `n` waiting completions for the gate to fetch with. */
  claim(n: number): WaitingCompletion[] {
    const claimed = this.waiting.slice(0, n);
    this.waiting = this.waiting.slice(claimed.length);
    for (const c of claimed) clearTimeout(c.timer);
    return claimed;
  }

  /** Completes jobs without fetching: the gate will not reserve for their slots soon. */
  completeAlone(which: readonly WaitingCompletion[] = this.waiting): void {
    if (which.length === 0) return;
    const set = new Set(which);
    this.waiting = this.waiting.filter((c) => !set.has(c));
    for (const c of which) {
      clearTimeout(c.timer);
      this.bull.complete(c.r.job, c.result, c.r.token, false).then(
        () => c.done(),
        (err: unknown) => c.done(err),
      );
    }
  }

  /**
   * Stores a result whose lock lapsed while its call ran (the process was stopped or its event
   * loop stalled): takes the lock back when no other worker took the job, and completes it in
   * the same transaction. When this worker's own gate fetched it meanwhile (`ownsToken`), the
   * launch of that fetch hands its token over to `r`; the store is tried again with it.
   */
  async completeLate(
    r: Finishing,
    result: JobResult,
    ownsToken: (token: string) => boolean,
  ): Promise<LateCompletion> {
    const deadline = performance.now() + OWN_FETCH_WAIT_MS;
    for (;;) {
      const late = await this.bull.completeLate(r.job, result, r.token);
      if (late.stored || late.holder === null || !ownsToken(late.holder)) return late;
      if (performance.now() > deadline) return late;
      await sleep(20);
    }
  }

  /**
   * Completes a waiting job and fetches the next one in the same command, locked with the same
   * token. Resolves with the job fetched, if any; a failed completion is the waiting job's own
   * error (its job is recovered as stalled), not the gate's.
   */
  async fetchVia(c: WaitingCompletion): Promise<Job<JobData, JobResult> | undefined> {
    let raw: unknown;
    try {
      raw = await this.bull.complete(c.r.job, c.result, c.r.token, true);
    } catch (err) {
      c.done(err);
      return undefined;
    }
    c.done();
    return this.bull.jobFrom(raw, c.r.token);
  }
}
