import { setTimeout as sleep } from 'node:timers/promises';
import { CostExceedsLimitError } from '../shared/errors.ts';
import { GLOBAL_SCOPE, type Reservation } from '../shared/limiter/types.ts';
import type { MetricsWriter } from '../shared/metrics.ts';
import type { CircuitBreaker } from './breaker.ts';
import type { HeadJob, HeadPeeker } from './bullmq-internals.ts';
import { sameScopes, type TakeParts, takeJobs } from './take.ts';

/** The oldest a peek sent behind the last round's fetches may be to stand for the next round's. */
const AHEAD_PEEK_MAX_AGE_MS = 20;

/** The worker's slots, as the gate sees them. */
export interface GateSlots {
  /** Calls this process runs at once. */
  readonly concurrency: number;
  /** Calls in flight (not the jobs that only wait to be stored). */
  busy(): number;
  /** Whether the breaker's trial call is under way here. */
  trialInFlight(): boolean;
  /** Resolves once a slot is free, or the worker stops. */
  waitForSlot(): Promise<void>;
}

export interface GateParts extends TakeParts {
  readonly breaker: CircuitBreaker;
  readonly metrics: MetricsWriter;
  readonly peeker: HeadPeeker;
  /** A peeker on BullMQ's own connection: its peeks run after the fetches sent before them. */
  readonly peekerBehindFetches: HeadPeeker;
  readonly slots: GateSlots;
  /** The worker's backfill option. */
  readonly backfill: boolean;
  readonly stopped: AbortSignal;
}

/** The jobs behind the head that may share its round trip: those charged to its scopes. */
function followers(heads: readonly HeadJob[]): HeadJob[] {
  const [first, ...rest] = heads;
  const out: HeadJob[] = [];
  for (const h of rest) {
    if (!first || !sameScopes(h.scopes, first.scopes)) break;
    out.push(h);
  }
  return out;
}

/**
 * The gate: one round peeks at the jobs BullMQ would hand out next, takes budget for them from
 * the shared limiter (waiting for it), then moves them to active and starts them.
 */
export class Gate {
  private idleMs = 5;
  private lastPrune = 0;
  /** When the last round had fetched its jobs, and whether this one began soon after. */
  private lastTakeAt = Number.NEGATIVE_INFINITY;
  private roundsFollowClosely = false;
  /** The peek sent behind the last round's fetches, for the next round while it is fresh. */
  private aheadPeek:
    | { readonly sentAt: number; readonly heads: Promise<HeadJob[] | undefined> }
    | undefined;
  private readonly hooks = {
    onFetchesSent: () => this.sendAheadPeek(),
    onArrived: () => {
      this.lastTakeAt = performance.now();
    },
  };

  constructor(private readonly p: GateParts) {}

  /** One round: wait for a slot, check the breaker, peek, acquire, take. */
  async round(): Promise<void> {
    const { p } = this;
    const { slots, handoff, limiter } = p;
    await slots.waitForSlot();
    if (p.stopped.aborted) return;
    const b = await p.breaker.check();
    // Not now, or a trial call, which goes alone: the jobs waiting to be stored do not wait.
    if (!b.allowed || b.trial) handoff.completeAlone();
    if (!b.allowed || (b.trial && slots.trialInFlight())) {
      await sleep(b.allowed ? 50 : Math.min(b.waitMs, 1_000), undefined, { signal: p.stopped });
      return;
    }
    // Every free slot at once: the jobs queued behind the head, charged to the same scopes, are
    // reserved in the head's round trip and fetched together. A trial call goes alone.
    const room = () => (b.trial ? 1 : Math.max(1, slots.concurrency - slots.busy()));
    this.roundsFollowClosely = performance.now() - this.lastTakeAt < AHEAD_PEEK_MAX_AGE_MS;
    const heads = (await this.nextPeek(room())) ?? (await p.peeker.peekMany(room()));
    let head = heads[0];
    if (!head) {
      handoff.completeAlone();
      // Idle: nothing acquires, so nothing prunes; keep the limiter's keys to one window's worth.
      if (Date.now() - this.lastPrune > 1_000) {
        this.lastPrune = Date.now();
        await limiter.prune();
      }
      await this.idle();
      return;
    }
    this.idleMs = 5;
    let behind = followers(heads);
    // Backfill goes by the slots free now, keeping one for the head.
    const backfillRoom = () => (p.backfill && !b.trial ? room() - 1 : 0);
    // The gate's place in the limiter's line: attempt, take what went ahead, step around a job
    // held by its own scope, sleep, look at the queue again.
    const line = limiter.line(head.cost, {
      scopes: head.scopes,
      priority: head.priority,
      more: behind.map((h) => h.cost),
      backfill: backfillRoom(),
    });
    let reservations: Reservation[];
    try {
      for (;;) {
        p.stopped.throwIfAborted();
        const a = await line.attempt();
        if (a.ok) {
          reservations = a.reservations;
          break;
        }
        if (a.ahead.length > 0) {
          const ahead = a.aheadIndexes.map((i) => behind[i]!);
          await this.takeAhead([...a.ahead], ahead);
        }
        // Waiting for budget: the jobs waiting to be stored do not wait with the gate.
        handoff.completeAlone();
        const d = a.denial;
        // A job held back by its own tenant's (or team's) budget must not hold back everyone
        // behind it: BullMQ would hand it out first all the same. Step around it instead.
        if (d.reason === 'budget' && d.scope && d.scope !== GLOBAL_SCOPE) {
          await line.leave().catch(() => {});
          return this.deferHeldJob(head.id, d.waitMs);
        }
        await line.sleep(a, p.stopped);
        // Look again: the head may have changed (a more urgent job), and so may the jobs
        // behind it (some went ahead) and the slots free for them (a trial still goes alone).
        const now = await p.peeker.peekMany(room());
        if (!now[0]) {
          // Nothing to see (paused, or another worker took the head): no jobs behind either,
          // rather than the ones seen before, which may have started since.
          behind = [];
          line.update({ more: [], backfill: 0 });
          continue;
        }
        head = now[0];
        behind = followers(now);
        line.update({
          cost: head.cost,
          priority: head.priority,
          scopes: head.scopes,
          more: behind.map((h) => h.cost),
          backfill: backfillRoom(),
        });
      }
    } catch (err) {
      await line.leave().catch(() => {});
      handoff.completeAlone();
      if (p.stopped.aborted) throw p.stopped.reason;
      if (err instanceof CostExceedsLimitError) return this.deadLetterHead(head.id, err);
      throw err;
    }
    const wanted = [head, ...behind.slice(0, reservations.length - 1)];
    const n = await takeJobs(p, wanted, reservations, b.trial, this.hooks);
    if (n === 0) {
      // Another worker took them, or BullMQ holds the queue: look again a little later rather
      // than reserving and releasing in a tight loop.
      handoff.completeAlone();
      await this.idle();
    }
  }

  /** Takes the jobs whose reservations went ahead of the waiting head (backfill). */
  private async takeAhead(rs: Reservation[], ahead: HeadJob[]): Promise<void> {
    const { p } = this;
    let take: number[];
    try {
      const moved = new Set(await p.peeker.moveToFront(ahead.map((h) => h.id)));
      take = ahead.flatMap((h, i) => (moved.has(h.id) ? [i] : []));
    } catch (err) {
      await Promise.all(rs.map((r) => p.limiter.release(r).catch(() => {})));
      throw err;
    }
    // Reservations for jobs no longer waiting (another worker took them) go back.
    await Promise.all(rs.filter((_, i) => !take.includes(i)).map((r) => p.limiter.release(r)));
    const n = await takeJobs(
      p,
      take.map((i) => ahead[i]!),
      take.map((i) => rs[i]!),
      false,
      this.hooks,
    );
    if (n === 0) p.handoff.completeAlone();
    p.metrics.add({ backfilled: take.length }).catch(() => {});
  }

  /** Waits a little longer each time the gate finds nothing to do, 200 ms at most. */
  private async idle(): Promise<void> {
    await sleep(this.idleMs, undefined, { signal: this.p.stopped });
    this.idleMs = Math.min(this.idleMs * 2, 200);
  }

  /**
   * When rounds follow each other closely, the next round's peek goes behind the fetches (in
   * the next turn: BullMQ writes a command a few promise steps after it is asked for).
   */
  private sendAheadPeek(): void {
    const { p } = this;
    if (!this.roundsFollowClosely || p.stopped.aborted) return;
    this.aheadPeek = {
      sentAt: performance.now(),
      heads: new Promise<void>((r) => setImmediate(r)).then(() =>
        p.peekerBehindFetches.peekMany(p.slots.concurrency).catch(() => undefined),
      ),
    };
  }

  /** The early peek while it is fresh: the round's peek without a round trip of its own. */
  private async nextPeek(n: number): Promise<HeadJob[] | undefined> {
    const ahead = this.aheadPeek;
    this.aheadPeek = undefined;
    if (!ahead || performance.now() - ahead.sentAt > AHEAD_PEEK_MAX_AGE_MS) return undefined;
    const heads = await ahead.heads;
    // Empty is no answer: the queue may have filled since; look again.
    if (!heads?.length) return undefined;
    return heads.slice(0, n);
  }

  /**
   * Moves a job that only its own scope's budget holds back to the delayed set until that budget
   * frees (no attempt spent), so the jobs behind it go ahead. It is active for that one move only.
   */
  private async deferHeldJob(jobId: string, waitMs: number): Promise<void> {
    const token = this.p.nextToken();
    const job = await this.p.bull.nextJob(token);
    if (!job) return;
    if (job.id !== jobId) {
      await job.moveToWait(token);
      return;
    }
    // The wait is an upper bound while the scope's calls are in flight (they free their budget
    // when they settle, not at a known time): look again within a second.
    await job.moveToDelayed(Date.now() + Math.min(Math.max(waitMs, 10), 1_000), token);
    await this.p.metrics.add({ deferred_by_scope: 1 });
  }

  /** The head job can never fit (the limits shrank after it was enqueued): dead-letter it. */
  private async deadLetterHead(headId: string, err: CostExceedsLimitError): Promise<void> {
    const token = this.p.nextToken();
    const job = await this.p.bull.nextJob(token);
    if (!job) return;
    if (job.id !== headId) {
      await job.moveToWait(token);
      return;
    }
    await this.p.outcomes.deadLetter(job, token, {
      reason: err.message,
      errorClass: 'CostExceedsLimitError',
    });
  }
}
