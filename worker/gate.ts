import { setTimeout as sleep } from 'node:timers/promises';
import { BudgetExhaustedError, type BudgetLedger } from '../shared/budgets.ts';
import { CostExceedsLimitError } from '../shared/errors.ts';
import { MAX_PER_ACQUIRE } from '../shared/limiter/limiter.ts';
import type { Line } from '../shared/limiter/line.ts';
import { type Charge, GLOBAL_SCOPE, type Reservation } from '../shared/limiter/types.ts';
import type { MetricsWriter } from '../shared/metrics.ts';
import type { RedisClient } from '../shared/redis.ts';
import type { BreakerCheck, CircuitBreaker } from './breaker.ts';
import type { HeadJob, HeadPeeker } from './bullmq-internals.ts';
import type { FairShare } from './fair-share.ts';
import { attemptAlong, fetchAlong, type SentFetch } from './fetch-along.ts';
import type { GatePaths } from './gate-paths.ts';
import type { GateWaits } from './gate-waits.ts';
import { HeadMoves } from './head-moves.ts';
import type { WorkerLogger } from './logger.ts';
import type { MarkerWait } from './marker-wait.ts';
import { chargeOf } from './money.ts';
import type { Deployment } from './pool.ts';
import { attemptInPool, type GateAttempt, othersGoElsewhere } from './pool-admission.ts';
import { DeploymentRooms } from './pool-room.ts';
import type { PromptCaches } from './prompt-caches.ts';
import { RoundPeek } from './round-peek.ts';
import { type TakeParts, takeJobs } from './take.ts';

/** The worker's slots, as the gate sees them. */
export interface GateSlots {
  /** Calls this process runs at once. */
  readonly concurrency: number;
  /** Calls in flight (not the jobs that only wait to be stored). */
  busy(): number;
  /** Whether the breaker's trial call (of a pool's deployment, by name) is under way here. */
  trialInFlight(deployment?: string): boolean;
  /** How many more calls may start on a pool's deployment before it holds its share of them. */
  shareRoom(d: Deployment): number;
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
  /** The paths beyond a peek at each round's start and a moveToActive per job (gate-paths.ts). */
  readonly paths: GatePaths;
  /** Money budgets, when configured: each job's worst case is held with its admission. */
  readonly ledger: BudgetLedger | undefined;
  /** Fair share between tenants, when on: a round's jobs go turn by turn by tenant. */
  readonly fair: FairShare | undefined;
  readonly stopped: AbortSignal;
  /** What the gate waits for, per job (traces, job logs, the wait histogram). */
  readonly waits: GateWaits;
}

/** A round's view of the queue: the jobs seen, those to admit in order, a cache writer's wait. */
interface RoundView {
  readonly seen: HeadJob[];
  readonly turn: HeadJob[];
  readonly cacheWaitMs: number;
}

/** What a round admitted: the jobs, their reservations, whether it is a breaker's trial call. */
interface Admitted {
  readonly wanted: HeadJob[];
  readonly reservations: Reservation[];
  readonly trial: boolean;
  readonly seen: readonly HeadJob[];
  readonly sent?: readonly SentFetch[] | undefined;
}

/** Why a job can never fit, with the cost it claimed when its request implies more. */
function neverFits(err: CostExceedsLimitError, head: HeadJob): string {
  const c = head.claimed;
  if (!c) return err.message;
  return `${err.message} (it claimed ${c.inputTokens} input and ${c.outputTokens} output tokens; its request implies more)`;
}

/**
 * The jobs behind the head that may share its round trip, whatever their scopes (each is
 * charged to its own): up to the first that cannot be scheduled. The acquire admits them in
 * this order while each fits, so a round stays full with many tenants.
 */
function followers(heads: readonly HeadJob[]): HeadJob[] {
  const rest = heads.slice(1);
  const i = rest.findIndex((h) => h.problem);
  return i < 0 ? rest : rest.slice(0, i);
}

/**
 * The gate: one round peeks at the jobs BullMQ would hand out next, takes budget for them from
 * the shared limiter (waiting for it), then moves them to active and starts them.
 */
export class Gate {
  private idleMs = 5;
  private lastPrune = 0;
  private readonly peeks: RoundPeek;
  /** The breaker's check sent behind the idle wait's pop, for the round it woke. */
  private aheadBreaker: Promise<BreakerCheck | undefined> | undefined;
  private readonly hooks = {
    onFetchesSent: (fetched: number) => this.peeks.fetchesSent(this.p.stopped.aborted, fetched),
    onArrived: () => this.peeks.arrived(),
  };

  private readonly moves: HeadMoves;
  /** A pool's deployments' room, read when two of equal preference may take a job. */
  private readonly rooms: DeploymentRooms | undefined;

  constructor(private readonly p: GateParts) {
    this.moves = new HeadMoves(p);
    this.peeks = new RoundPeek(
      p.peeker,
      p.peekerBehindFetches,
      () => this.free(),
      p.paths.earlyPeeks,
    );
    this.rooms = p.pool ? new DeploymentRooms(p.limiter) : undefined;
  }

  /** One round: wait for a slot, check the breaker, peek, acquire, take. */
  async round(): Promise<void> {
    const { p } = this;
    const slotAt = Date.now();
    await p.slots.waitForSlot();
    p.waits.hold('slots', slotAt);
    if (p.stopped.aborted) return;
    // The peek travels with the breaker's check: one round trip for both.
    const sent = p.fair ? undefined : this.peeks.send(this.free());
    const b = await this.checkBreaker();
    if (!b) return;
    const v = await this.look(b.trial, sent);
    if (v.cacheWaitMs > 0) return this.waitForWriter(v.cacheWaitMs);
    const head = v.turn[0];
    if (!head) return this.whenIdle();
    this.idleMs = 5;
    if (head.problem) return this.moves.setAside(head.id, head.problem);
    const got = await this.admit(b.trial, v);
    if (!got) return;
    let { wanted, reservations } = got;
    if (p.fair) {
      // The admitted jobs go where BullMQ hands out from next, in turn order (unless the head
      // alone is there already; fetched along, they went in the acquire's transaction); their
      // tenants are charged.
      const kept = got.sent
        ? { wanted, reservations }
        : await this.toFront(wanted, got.seen, reservations);
      wanted = kept.wanted;
      reservations = kept.reservations;
      if (wanted.length === 0) {
        p.handoff.completeAlone();
        return;
      }
      await p.fair.charge(wanted);
    }
    const n = await takeJobs(p, wanted, reservations, got.trial, this.hooks, got.sent);
    if (n === 0) {
      // Another worker took them, or BullMQ holds the queue: look again a little later rather
      // than reserving and releasing in a tight loop.
      p.handoff.completeAlone();
      await this.idle();
    }
  }

  /**
   * The queue's breaker: whether calls may go out (a trial call goes alone); undefined after
   * holding the round back. A pool's deployments have breakers of their own, checked as a job is
   * admitted into one (pool-admission.ts).
   */
  private async checkBreaker(): Promise<{ trial: boolean } | undefined> {
    const { p } = this;
    if (p.pool) return { trial: false };
    const ahead = this.aheadBreaker;
    this.aheadBreaker = undefined;
    const b = (await ahead) ?? (await p.breaker.check());
    // Not now, or a trial call, which goes alone: the jobs waiting to be stored do not wait.
    if (!b.allowed || b.trial) p.handoff.completeAlone();
    if (!b.allowed || (b.trial && p.slots.trialInFlight())) {
      const heldAt = Date.now();
      await sleep(b.allowed ? 50 : Math.min(b.waitMs, 1_000), undefined, { signal: p.stopped });
      p.waits.hold('breaker', heldAt);
      return undefined;
    }
    return { trial: b.trial };
  }

  /**
   * The round's jobs in the order to admit them, as of a fresh peek (or, first, the one `sent`):
   * with fair share, turn by turn by tenant; else in BullMQ's order (each charged to its own
   * scopes). Every free slot at once, a trial call alone. With
   * prompt caching, each costs what the provider will count (prompt-caches.ts), and a head whose
   * prefix another job is writing waits for it (`cacheWaitMs`).
   */
  private async look(trial: boolean, sent?: Promise<HeadJob[] | undefined>): Promise<RoundView> {
    const { p } = this;
    const { fair } = p;
    // How many jobs the round may take, as of this peek (the order must not ask for more of a
    // tenant than it gave of each).
    const want = trial ? 1 : this.free();
    const early = (await sent)?.slice(0, want);
    const seen = await p.costs.scale(early ?? (await p.peeker.peekMany(want, fair ? want : 0)));
    const t = fair
      ? await fair.order(seen, want)
      : seen.length > 0
        ? [seen[0]!, ...followers(seen)]
        : [];
    const planned = await p.caches.plan(t);
    return { seen, turn: planned.turn, cacheWaitMs: planned.waitMs ?? 0 };
  }

  /** Nothing waits: the idle gate prunes, then sleeps until a job is enqueued (or falls due). */
  private async whenIdle(): Promise<void> {
    const { p } = this;
    p.handoff.completeAlone();
    // Idle: nothing acquires, so nothing prunes; keep the limiter's keys to one window's worth.
    if (Date.now() - this.lastPrune > 1_000) {
      this.lastPrune = Date.now();
      await p.limiter.prune();
    }
    // As BullMQ's workers do; results meanwhile are stored at once.
    p.handoff.setGateIdle(true);
    try {
      // The queue's breaker is checked behind the pop too: a woken round needs no round trip for
      // it (nor for its peek). Without early peeks neither goes: the round peeks and checks at
      // its start.
      let breaker: Promise<BreakerCheck | undefined> | undefined;
      const behind =
        p.pool || !p.paths.earlyPeeks
          ? undefined
          : (conn: RedisClient) => {
              breaker = p.breaker.check(conn).catch(() => undefined);
            };
      const peek = p.paths.earlyPeeks ? this.free() : 0;
      const heads = await p.idleWait.wait(p.idleCheckMs, p.stopped, peek, behind);
      if (heads?.length) {
        this.peeks.woke(heads);
        this.aheadBreaker = breaker;
      }
    } finally {
      p.handoff.setGateIdle(false);
    }
  }

  /**
   * The gate's place in the limiter's line: attempt, step around a job held by its own scope or
   * money budget, sleep, look at the queue again. Each job's charge: its tokens, its money (held
   * with its admission), its own scopes (the jobs behind the head may be other tenants').
   * Undefined when the round ends without an admission.
   */
  private async admit(trial: boolean, first: RoundView): Promise<Admitted | undefined> {
    const { p } = this;
    let v = first;
    let head = v.turn[0]!;
    let behind = v.turn.slice(1);
    // Each job charged to its own scopes: the jobs behind the head may be other tenants'.
    const charge = (h: HeadJob) => chargeOf(p.ledger, h, true);
    const line = p.limiter.line(charge(head), {
      scopes: head.scopes,
      priority: head.priority,
      more: behind.map(charge),
    });
    try {
      for (;;) {
        p.stopped.throwIfAborted();
        const a = await this.attempt({ line, head, behind, charge, trial });
        if (a.ok) {
          p.waits.admitted(head.id);
          const wanted = [head, ...a.behind.slice(0, a.reservations.length - 1)];
          const { reservations, trial: tr, sent } = a;
          return { wanted, reservations, trial: tr, seen: v.seen, sent };
        }
        // Waiting: the jobs waiting to be stored do not wait with the gate.
        p.handoff.completeAlone();
        if (await this.denied(line, a, head, v.seen)) return undefined;
        // Look again: the head may have changed (a more urgent job), and so may the jobs
        // behind it (some went ahead) and the slots free for them (a trial still goes alone).
        v = await this.look(trial);
        if (v.cacheWaitMs > 0) {
          await line.leave().catch(() => {});
          await this.waitForWriter(v.cacheWaitMs);
          return undefined;
        }
        const next = v.turn[0];
        if (!next) {
          // Nothing to see (paused, or another worker took the head): no jobs behind either,
          // rather than the ones seen before, which may have started since.
          behind = [];
          line.update({ more: [] });
          continue;
        }
        head = next;
        behind = v.turn.slice(1);
        line.update({
          cost: charge(head),
          priority: head.priority,
          scopes: head.scopes,
          more: behind.map(charge),
        });
      }
    } catch (err) {
      await line.leave().catch(() => {});
      p.handoff.completeAlone();
      if (p.stopped.aborted) throw p.stopped.reason;
      if (err instanceof CostExceedsLimitError)
        await this.moves.deadLetter(head.id, {
          reason: neverFits(err, head),
          errorClass: 'CostExceedsLimitError',
        });
      else throw err;
      return undefined;
    }
  }

  /** One attempt: into the queue's one scope set, or into the pool's deployments in turn. */
  private async attempt(t: {
    line: Line;
    head: HeadJob;
    behind: readonly HeadJob[];
    charge: (h: HeadJob) => Charge;
    trial: boolean;
  }): Promise<GateAttempt> {
    const { pool, slots } = this.p;
    if (pool)
      return attemptInPool({
        ...t,
        pool,
        rooms: this.rooms,
        trialInFlight: (d) => slots.trialInFlight(d),
        shareRoom: (d) => slots.shareRoom(d),
        fetchAlong: (heads) => fetchAlong(this.p, heads),
      });
    const a = await attemptAlong(t.line, fetchAlong(this.p, [t.head, ...t.behind]));
    return a.ok ? { ...a, behind: t.behind, trial: t.trial } : a;
  }

  /**
   * A denied attempt: true when the round ends here (the head was set aside, deferred or held
   * for its money budget, or the pool's breakers hold it), else after sleeping in line.
   */
  private async denied(
    line: Line,
    a: Exclude<GateAttempt, { ok: true }>,
    head: HeadJob,
    seen: readonly HeadJob[],
  ): Promise<boolean> {
    const { p } = this;
    if ('problem' in a || 'held' in a) {
      await line.leave().catch(() => {});
      if ('problem' in a)
        await this.moves.deadLetter(head.id, {
          reason: a.problem,
          errorClass: 'DeploymentNotFoundError',
        });
      else await this.holdForBreakers(head, seen, a.held);
      return true;
    }
    const d = a.denial;
    // Its money budget is spent (it left the line): it waits for the next period, or is
    // dead-lettered, by policy.
    if (d.money) {
      await this.moves.holdForBudget(head.id, BudgetExhaustedError.of(d.money));
      return true;
    }
    p.waits.denied(head.id, d);
    // A job held back by its own tenant's (or model's) budget, or in a pool by the deployments
    // it may go to, must not hold back the jobs behind it that the same does not hold: BullMQ
    // would hand it out first all the same. Step around it instead (not when every job seen is
    // held by the same).
    const scope = d.reason === 'budget' && d.scope !== GLOBAL_SCOPE ? d.scope : undefined;
    const stepAround = a.inPool
      ? othersGoElsewhere(p.pool, head, seen)
      : scope !== undefined && seen.some((h) => !h.scopes.includes(scope));
    if (stepAround) {
      await line.leave().catch(() => {});
      await this.moves.defer(head.id, d.waitMs);
      return true;
    }
    await line.sleep(a, p.stopped);
    return false;
  }

  /** Every deployment that may take the head has its breaker open: the others go ahead, or all wait. */
  private async holdForBreakers(head: HeadJob, seen: readonly HeadJob[], ms: number) {
    if (othersGoElsewhere(this.p.pool, head, seen)) return this.moves.defer(head.id, ms);
    const heldAt = Date.now();
    await sleep(Math.min(ms, 1_000), undefined, { signal: this.p.stopped });
    this.p.waits.hold('breaker', heldAt);
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
      const jobs = wanted.map((h, i) => ({ id: h.id, reservation: reservations[i]!.id }));
      moved = new Set(await this.p.peeker.moveToFront(jobs));
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
   * Slots free now (at least one: the round waited for it), at most what one acquire admits: a
   * round's fetches ride with its acquire, none beyond what it may admit.
   */
  private free(): number {
    return Math.min(MAX_PER_ACQUIRE, Math.max(1, this.p.slots.concurrency - this.p.slots.busy()));
  }
}
