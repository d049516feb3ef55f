import { setTimeout as sleep } from 'node:timers/promises';
import type { Job } from 'bullmq';
import { BudgetExhaustedError, type BudgetLedger } from '../shared/budgets.ts';
import { CostExceedsLimitError } from '../shared/errors.ts';
import type { JobData, JobResult } from '../shared/job.ts';
import { GLOBAL_SCOPE, type Reservation } from '../shared/limiter/types.ts';
import type { MetricsWriter } from '../shared/metrics.ts';
import type { CircuitBreaker } from './breaker.ts';
import type { HeadJob, HeadPeeker } from './bullmq-internals.ts';
import type { FairShare } from './fair-share.ts';
import type { GateWaits } from './gate-waits.ts';
import type { WorkerLogger } from './logger.ts';
import type { MarkerWait } from './marker-wait.ts';
import { chargeOf } from './money.ts';
import type { PromptCaches } from './prompt-caches.ts';
import { sameScopes, type TakeParts, takeJobs } from './take.ts';

/** The oldest a peek sent behind the last round's fetches may be to stand for the next round's. */
const AHEAD_PEEK_MAX_AGE_MS = 20;

/** How long a job of a newer format waits before a worker looks at it again. */
const NEWER_FORMAT_DELAY_MS = 60_000;

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
  readonly log: WorkerLogger;
  /** Prompt caching: what a cached prefix lets a job reserve, and who writes it. */
  readonly caches: PromptCaches;
  readonly breaker: CircuitBreaker;
  readonly metrics: MetricsWriter;
  readonly peeker: HeadPeeker;
  /** A peeker on BullMQ's own connection: its peeks run after the fetches sent before them. */
  readonly peekerBehindFetches: HeadPeeker;
  readonly slots: GateSlots;
  /** Wakes the idle gate when a job is enqueued. */
  readonly idleWait: MarkerWait;
  /** The longest the idle gate waits for a wake-up before it looks at the queue again. */
  readonly idleCheckMs: number;
  /** Money budgets, when configured: each job's worst case is held with its admission. */
  readonly ledger: BudgetLedger | undefined;
  /** Fair share between tenants, when on: a round's jobs go turn by turn by tenant. */
  readonly fair: FairShare | undefined;
  readonly stopped: AbortSignal;
  /** What the gate waits for, per job (traces, job logs, the wait histogram). */
  readonly waits: GateWaits;
}

/** The jobs behind the head that may share its round trip: those charged to its scopes. */
function followers(heads: readonly HeadJob[]): HeadJob[] {
  const [first, ...rest] = heads;
  const out: HeadJob[] = [];
  for (const h of rest) {
    if (!first || h.problem || !sameScopes(h.scopes, first.scopes)) break;
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
    const slotAt = Date.now();
    await slots.waitForSlot();
    p.waits.hold('slots', slotAt);
    if (p.stopped.aborted) return;
    const b = await p.breaker.check();
    // Not now, or a trial call, which goes alone: the jobs waiting to be stored do not wait.
    if (!b.allowed || b.trial) handoff.completeAlone();
    if (!b.allowed || (b.trial && slots.trialInFlight())) {
      const heldAt = Date.now();
      await sleep(b.allowed ? 50 : Math.min(b.waitMs, 1_000), undefined, { signal: p.stopped });
      p.waits.hold('breaker', heldAt);
      return;
    }
    // Every free slot at once: the jobs queued behind the head, charged to the same scopes, are
    // reserved in the head's round trip and fetched together. A trial call goes alone.
    const room = () => (b.trial ? 1 : Math.max(1, slots.concurrency - slots.busy()));
    this.roundsFollowClosely = performance.now() - this.lastTakeAt < AHEAD_PEEK_MAX_AGE_MS;
    const { fair, ledger } = p;
    // How many jobs the round may take, as of its latest peek (the order must not ask for more
    // of a tenant than that peek gave of each).
    let want = room();
    const peek = async (): Promise<HeadJob[]> => {
      want = room();
      return p.costs.scale(
        fair ? await p.peeker.peekMany(fair.lookahead, want) : await p.peeker.peekMany(want),
      );
    };
    // The round's jobs in the order to admit them: with fair share, turn by turn by tenant (each
    // charged to its own scopes); else the head and the jobs behind it charged to its scopes.
    // With prompt caching, each costs what the provider will count (prompt-caches.ts), and a head
    // whose prefix another job is writing waits for it (`cacheWaitMs`).
    let cacheWaitMs = 0;
    const inTurn = async (hs: HeadJob[]): Promise<HeadJob[]> => {
      const t = fair ? await fair.order(hs, want) : hs.length > 0 ? [hs[0]!, ...followers(hs)] : [];
      const planned = await p.caches.plan(t);
      cacheWaitMs = planned.waitMs ?? 0;
      return planned.turn;
    };
    let seen = fair
      ? await peek()
      : await p.costs.scale((await this.nextPeek(want)) ?? (await p.peeker.peekMany(want)));
    let turn = await inTurn(seen);
    let head = turn[0];
    if (cacheWaitMs > 0) return this.waitForWriter(cacheWaitMs);
    if (!head) {
      handoff.completeAlone();
      // Idle: nothing acquires, so nothing prunes; keep the limiter's keys to one window's worth.
      if (Date.now() - this.lastPrune > 1_000) {
        this.lastPrune = Date.now();
        await limiter.prune();
      }
      // Nothing waits: sleep until a job is enqueued (or falls due), as BullMQ's workers do;
      // results meanwhile are stored at once.
      handoff.setGateIdle(true);
      try {
        const heads = await p.idleWait.wait(p.idleCheckMs, p.stopped, slots.concurrency);
        if (heads?.length)
          this.aheadPeek = { sentAt: performance.now(), heads: Promise.resolve(heads) };
      } finally {
        handoff.setGateIdle(false);
      }
      return;
    }
    this.idleMs = 5;
    if (head.problem) return this.setAside(head.id, head.problem);
    let behind = turn.slice(1);
    // Each job's charge: its tokens, its money (held with its admission), with fair share its
    // own scopes (the jobs behind the head may be other tenants').
    const charge = (h: HeadJob) => chargeOf(ledger, h, fair !== undefined);
    // The gate's place in the limiter's line: attempt, step around a job held by its own scope
    // or money budget, sleep, look at the queue again.
    const line = limiter.line(charge(head), {
      scopes: head.scopes,
      priority: head.priority,
      more: behind.map(charge),
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
        const d = a.denial;
        if (d.money) {
          // Its money budget is spent (it left the line): it waits for the next period, or is
          // dead-lettered, by policy.
          handoff.completeAlone();
          return this.holdForBudget(head.id, BudgetExhaustedError.of(d.money));
        }
        p.waits.denied(head.id, d);
        // Waiting for budget: the jobs waiting to be stored do not wait with the gate.
        handoff.completeAlone();
        // A job held back by its own tenant's (or model's) budget must not hold back the jobs
        // behind it that budget does not hold: BullMQ would hand it out first all the same.
        // Step around it instead (not when every job seen is held by the same budget).
        const scope = d.reason === 'budget' && d.scope !== GLOBAL_SCOPE ? d.scope : undefined;
        if (scope && seen.some((h) => !h.scopes.includes(scope))) {
          await line.leave().catch(() => {});
          return this.deferHeldJob(head.id, d.waitMs);
        }
        await line.sleep(a, p.stopped);
        // Look again: the head may have changed (a more urgent job), and so may the jobs
        // behind it (some went ahead) and the slots free for them (a trial still goes alone).
        seen = await peek();
        turn = await inTurn(seen);
        if (cacheWaitMs > 0) {
          await line.leave().catch(() => {});
          return this.waitForWriter(cacheWaitMs);
        }
        const next = turn[0];
        if (!next) {
          // Nothing to see (paused, or another worker took the head): no jobs behind either,
          // rather than the ones seen before, which may have started since.
          behind = [];
          line.update({ more: [] });
          continue;
        }
        head = next;
        behind = turn.slice(1);
        line.update({
          cost: charge(head),
          priority: head.priority,
          scopes: head.scopes,
          more: behind.map(charge),
        });
      }
    } catch (err) {
      await line.leave().catch(() => {});
      handoff.completeAlone();
      if (p.stopped.aborted) throw p.stopped.reason;
      if (err instanceof CostExceedsLimitError) return this.deadLetterHead(head.id, err);
      throw err;
    }
    p.waits.admitted(head.id);
    let wanted = [head, ...behind.slice(0, reservations.length - 1)];
    if (fair) {
      // The admitted jobs go where BullMQ hands out from next, in turn order (unless the head
      // alone is there already); their tenants are charged.
      const kept = await this.toFront(wanted, seen, reservations);
      wanted = kept.wanted;
      reservations = kept.reservations;
      if (wanted.length === 0) {
        handoff.completeAlone();
        return;
      }
      await fair.charge(wanted);
    }
    const n = await takeJobs(p, wanted, reservations, b.trial, this.hooks);
    if (n === 0) {
      // Another worker took them, or BullMQ holds the queue: look again a little later rather
      // than reserving and releasing in a tight loop.
      handoff.completeAlone();
      await this.idle();
    }
  }

  /**
   * Moves fair share's admitted jobs to where BullMQ hands out from next, in their order; the
   * reservations of those no longer waiting (another worker took them) go back.
   */
  private async toFront(
    wanted: HeadJob[],
    seen: readonly HeadJob[],
    reservations: Reservation[],
  ): Promise<{ wanted: HeadJob[]; reservations: Reservation[] }> {
    if (wanted.length === 1 && wanted[0] === seen[0]) return { wanted, reservations };
    const release = (rs: Reservation[]) =>
      Promise.all(rs.map((r) => this.p.limiter.release(r).catch(() => {})));
    let moved: Set<string>;
    try {
      moved = new Set(await this.p.peeker.moveToFront(wanted.map((h) => h.id)));
    } catch (err) {
      await release(reservations);
      throw err;
    }
    await release(reservations.filter((_, i) => !moved.has(wanted[i]!.id)));
    return {
      wanted: wanted.filter((h) => moved.has(h.id)),
      reservations: reservations.filter((_, i) => moved.has(wanted[i]!.id)),
    };
  }

  /** The head's cached prefix is being written by another job: look again in a moment. */
  private async waitForWriter(ms: number): Promise<void> {
    this.p.handoff.completeAlone();
    const heldAt = Date.now();
    await sleep(ms, undefined, { signal: this.p.stopped }).catch(() => {});
    this.p.waits.hold('cache', heldAt);
  }

  /** Waits a little longer each time a take comes back empty, 200 ms at most. */
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
    const taken = await this.takeHead(jobId);
    if (!taken) return;
    const { job, token } = taken;
    // The wait is an upper bound while the scope's calls are in flight (they free their budget
    // when they settle, not at a known time): look again within a second.
    await job.moveToDelayed(Date.now() + Math.min(Math.max(waitMs, 10), 1_000), token);
    await this.p.metrics.add({ deferred_by_scope: 1 });
  }

  /** Moves the head job to active to act on it; undefined (and put back) when another came first. */
  private async takeHead(
    headId: string,
  ): Promise<{ job: Job<JobData, JobResult>; token: string } | undefined> {
    // Fair share's head need not be where BullMQ hands out next: put it there first, or another
    // tenant's job comes out instead, round after round.
    if (this.p.fair && (await this.p.peeker.moveToFront([headId])).length === 0) return undefined;
    const token = this.p.nextToken();
    const job = await this.p.bull.nextJob(token);
    if (!job) return undefined;
    if (job.id !== headId) {
      await job.moveToWait(token);
      return undefined;
    }
    return { job, token };
  }

  /**
   * The head job's money budget is spent (the limiter said so at admission, holding nothing):
   * by policy it waits (delayed) until the budget's period ends, or goes to the dead letters
   * with budget_exhausted.
   */
  private async holdForBudget(headId: string, over: BudgetExhaustedError): Promise<void> {
    const taken = await this.takeHead(headId);
    if (!taken) return;
    const { job, token } = taken;
    if (this.p.ledger?.settings.policy === 'dead-letter' || over.resetsAt === undefined) {
      await this.p.outcomes.deadLetter(job, token, {
        reason: over.message,
        errorClass: 'BudgetExhaustedError',
      });
      return;
    }
    await job.moveToDelayed(over.resetsAt, token);
    await this.p.metrics.add({ deferred_by_budget: 1 });
  }

  /**
   * A head that cannot be scheduled does not hold the queue: one that is no llmq job is
   * dead-lettered at once with what is wrong; one of a newer format is left, delayed, for a
   * worker that reads it (said in the log).
   */
  private async setAside(headId: string, problem: { newer: boolean; reason: string }) {
    const taken = await this.takeHead(headId);
    if (!taken) return;
    const { job, token } = taken;
    if (problem.newer) {
      this.p.log.warn('left a job for a worker of a newer llmq', {
        job: headId,
        why: problem.reason,
      });
      await job.moveToDelayed(Date.now() + NEWER_FORMAT_DELAY_MS, token);
      return;
    }
    await this.p.outcomes.deadLetter(job, token, {
      reason: `the job cannot be read: ${problem.reason}`,
      errorClass: 'InvalidJobError',
    });
  }

  /** The head job can never fit (the limits shrank after it was enqueued): dead-letter it. */
  private async deadLetterHead(headId: string, err: CostExceedsLimitError): Promise<void> {
    const taken = await this.takeHead(headId);
    if (!taken) return;
    const { job, token } = taken;
    await this.p.outcomes.deadLetter(job, token, {
      reason: err.message,
      errorClass: 'CostExceedsLimitError',
    });
  }
}
