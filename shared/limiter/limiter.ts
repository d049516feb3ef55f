import { randomUUID } from 'node:crypto';
import { Batcher } from '../batcher.ts';
import { DIMENSIONS } from '../dimensions.ts';
import { CostExceedsLimitError, LimiterUnavailableError } from '../errors.ts';
import { type LimiterKeys, limiterKeys, wakeChannel } from './limiter-keys.ts';
import {
  type AcquireManyOptions,
  type AcquireOptions,
  checkAttempt,
  checkCost,
  type LimiterOptions,
  type LimiterSettings,
  limitsOf,
  moneyDenial,
  resolveLimiterOptions,
  scopeList,
  scriptScopes,
  usageError,
} from './options.ts';
import {
  type HeaderSource,
  type ProviderReading,
  readRateLimitHeaders,
} from './provider-headers.ts';
import { readSnapshot } from './reader.ts';
import { AcquireCode, LimiterScripts, type SettleCall, type SettleResult } from './scripts.ts';
import { Line, type LineRequest, waitInLine } from './ticket.ts';
import {
  type Charge,
  type Cost,
  type Decision,
  GLOBAL_SCOPE,
  type LimiterSnapshot,
  type Reservation,
  type Usage,
} from './types.ts';
import { WakeUps } from './wake.ts';

export type { AcquireManyOptions, AcquireOptions, LimiterOptions };

const HISTORY_BUCKET_MS = 10_000;

/** The reason of a denial that only says how long to wait. */
const DENIAL = {
  [AcquireCode.Queued]: 'queued',
  [AcquireCode.Paused]: 'paused',
  [AcquireCode.Concurrency]: 'concurrency',
  [AcquireCode.ProbeOut]: 'probe',
} as const;

/** The longest a lazy stamp ({@link Limiter.start}) waits for others. */
export const LAZY_STAMP_MS = 10;

/**
 * The longest a settle with the provider's usage ({@link Limiter.settle}) waits for others. The
 * next acquire on this limiter takes waiting settles along (Redis runs them first), and so does
 * a release or keep, which goes at the end of its turn.
 */
export const SETTLE_WAIT_MS = 5;

/**
 * The shared budget of every worker process: a sliding-window log of reservations per scope and
 * dimension, a concurrency semaphore with leases, a shared pause and a fair line of waiters,
 * all in Redis and all decided by Lua scripts on Redis's clock.
 */
export class Limiter {
  readonly windowMs: number;
  readonly concurrency: number;
  readonly headroom: number;
  readonly outputAccounting: 'reserve' | 'actual';
  readonly probeMs: number;
  /** The options, defaults filled in. */
  private readonly settings: LimiterSettings;
  private readonly keys: LimiterKeys;
  private readonly scripts: LimiterScripts;
  private readonly wakeChannel: string;
  private readonly wakeUps: WakeUps;
  /**
   * Stamps, and ends (settles, keeps, releases), gathered: each batch is one command. Stamps
   * wait up to LAZY_STAMP_MS when lazy, settles up to SETTLE_WAIT_MS.
   */
  private readonly stamps: Batcher<string, void>;
  private readonly ends: Batcher<SettleCall, SettleResult>;

  constructor(options: LimiterOptions) {
    const o = resolveLimiterOptions(options);
    this.settings = o;
    this.windowMs = o.windowMs;
    this.concurrency = o.concurrency;
    this.headroom = o.headroom;
    this.outputAccounting = o.outputAccounting;
    this.probeMs = o.probeMs;
    this.wakeChannel = wakeChannel(o.names);
    this.wakeUps = new WakeUps(o.subscriber, this.wakeChannel);
    this.keys = limiterKeys(o.names);
    this.scripts = new LimiterScripts(o.redis, this.keys, o.commandTimeoutMs, o.clock);
    this.stamps = new Batcher<string, void>(
      async (ids) => {
        // Under `actual` accounting the provider charges output until the end: the reservation
        // stays open (stamped at its renewed lease) until settle stamps it, or a call streaming
        // longer than the window would leave it before it is settled. It is only marked as begun.
        await this.scripts.start(this.outputAccounting === 'actual' ? 'mark' : 'stamp', ids);
        return [];
      },
      { delayMs: LAZY_STAMP_MS },
    );
    this.ends = new Batcher(
      (calls) => this.scripts.settle(calls, HISTORY_BUCKET_MS, this.wakeChannel),
      { delayMs: SETTLE_WAIT_MS },
    );
  }

  /** Every key the limiter writes (for cleanup and for the cluster hash-tag test). */
  get allKeys(): readonly string[] {
    return Object.values(this.keys);
  }

  private get windowArg(): number {
    return this.windowMs + this.settings.windowMarginMs;
  }

  private async attempt(
    ticket: string,
    cost: Charge,
    scopes: readonly string[],
    priority: number,
    queue: boolean,
    more: readonly { ticket: string; cost: Charge }[] = [],
    backfill = 0,
  ): Promise<Decision & { more?: Reservation[]; ahead?: Reservation[]; aheadIndexes?: number[] }> {
    checkAttempt(cost, more, priority);
    // Calls ended in this turn give their budget and slots back first (same connection, so Redis
    // runs them first): a worker that reserves for its next job as the last one ends finds them.
    this.ends.flush();
    const r = await this.scripts.acquire({
      windowMs: this.windowArg,
      ticket,
      priority,
      queue,
      leaseMs: this.settings.leaseMs,
      ticketTtlMs: Math.max(5_000, this.settings.maxPollMs * 5),
      concurrency: this.concurrency,
      cost,
      scopes: scriptScopes(this.settings, scopes),
      extras: more.map((m) => ({
        ...m,
        scopes: m.cost.scopes && scriptScopes(this.settings, m.cost.scopes),
      })),
      backfill,
      // Only a waiter that keeps its place in line goes as a probe.
      probeMs: this.probeMs,
    });
    const reservation = (id: string, c: Charge, at: number): Reservation => ({
      id,
      cost: c,
      scopes: scopeList(c.scopes ?? scopes),
      admittedAt: at,
      leaseExpiresAt: at + this.settings.leaseMs,
    });
    switch (r.code) {
      case AcquireCode.Admitted: {
        return {
          ok: true,
          reservation: reservation(ticket, cost, r.now),
          more: more.slice(0, r.extras).map((m) => reservation(m.ticket, m.cost, r.now)),
        };
      }
      case AcquireCode.Budget: {
        const { waitMs, scope, dimension, backfilled: i } = r;
        // Extras that went ahead (backfill); Redis time is not in a denial's answer, so their
        // admittedAt is only informative.
        const at = Date.now();
        const ahead = i.map((j) => reservation(more[j]!.ticket, more[j]!.cost, at));
        const went = i.length > 0 ? { ahead, aheadIndexes: i } : {};
        return { ok: false, reason: 'budget', waitMs, scope, dimension, ...went };
      }
      case AcquireCode.NeverFits: {
        const limit = limitsOf(this.settings, r.scope)[r.dimension] ?? r.limit;
        throw new CostExceedsLimitError(r.scope, r.dimension, r.cost, limit);
      }
      case AcquireCode.BudgetExhausted:
        return moneyDenial(cost.money, r);
      default:
        return { ok: false, reason: DENIAL[r.code], waitMs: r.waitMs };
    }
  }

  /**
   * One attempt that does not keep a place in line: admitted now, or a denial saying how long
   * to wait. Throws {@link CostExceedsLimitError} when the cost can never fit.
   */
  tryAcquire(
    cost: Charge,
    options: { scopes?: readonly string[]; priority?: number } = {},
  ): Promise<Decision> {
    return this.attempt(randomUUID(), cost, options.scopes ?? [], options.priority ?? 100, false);
  }

  /**
   * Waits in line (priority, then arrival, across every process) until the cost fits every
   * dimension of every scope and a concurrency slot is free, then reserves it. Throws
   * {@link CostExceedsLimitError} when it can never fit, {@link LimiterUnavailableError} when
   * Redis cannot answer (nothing is reserved then), and the signal's reason when aborted.
   */
  async acquire(cost: Charge, options: AcquireOptions = {}): Promise<Reservation> {
    const [first] = await this.acquireMany(cost, options);
    return first as Reservation;
  }

  /**
   * A place in the fair line that its caller drives: attempt, then sleep for the denial's wait
   * (or until woken), possibly with a new cost, and leave when it stops waiting.
   */
  line(cost: Charge, options: Partial<LineRequest> = {}): Line {
    return new Line(
      {
        attempt: (ticket, r, tickets) =>
          this.attempt(ticket, r.cost, r.scopes, r.priority, true, tickets, r.backfill),
        sleepOrWake: (ms, wakeable, signal) => this.wakeUps.sleep(ms, wakeable, signal),
        cancel: (ticket) => this.cancel(ticket),
        maxPollMs: this.settings.maxPollMs,
      },
      { cost, scopes: [], priority: 100, more: [], backfill: 0, ...options },
    );
  }

  /**
   * {@link acquire}, and in the same round trip as many of the calls queued behind it
   * (`options.more`) as fit at once: resolves with this call's reservation first, then one for
   * each of the first k of `more` admitted (possibly none). Built on {@link line}.
   */
  async acquireMany(cost: Charge, options: AcquireManyOptions = {}): Promise<Reservation[]> {
    const line = this.line(cost, {
      scopes: options.scopes ?? [],
      priority: options.priority ?? 100,
      more: options.more ?? [],
      backfill: options.onBackfill ? (options.backfill ?? 0) : 0,
    });
    return waitInLine(line, options);
  }

  /**
   * Sends the stamps and ends still gathered, and stops listening for wake-ups (the connections
   * stay the caller's to close).
   */
  async close(): Promise<void> {
    // What is gathered goes now, ahead of whatever the owner sends next (QUIT, say).
    this.ends.flush();
    this.stamps.flush();
    await this.wakeUps.close();
  }

  private async cancel(ticket: string): Promise<void> {
    await this.scripts.cancel(ticket);
  }

  /**
   * Lowers (or raises, at the caller's risk) an open reservation's cost without changing its
   * stamp or slot: the worker got a job that costs no more than the one it reserved for.
   */
  async adjust(reservation: Reservation, cost: Cost): Promise<Reservation> {
    checkCost(cost);
    await this.scripts.adjust(reservation.id, cost.inputTokens, cost.outputTokens);
    return { ...reservation, cost: { ...cost, requests: reservation.cost.requests } };
  }

  /**
   * Stamps the reservation when the provider's response begins (it was admitted by then).
   * Stamps of calls that begin in the same turn of the event loop go in one command. A `lazy`
   * stamp waits up to {@link LAZY_STAMP_MS} for others (a stamp may come late, never early: the
   * window keeps the call a little longer); a call that ends meanwhile is stamped by its settle,
   * in the same command. Not lazy when a provider's reading follows, which must find it stamped.
   */
  start(reservation: Reservation, options: { readonly lazy?: boolean } = {}): Promise<void> {
    return this.stamps.push(reservation.id, !options.lazy);
  }

  /** Extends the lease of a call in flight; false when the lease was already lost. */
  async renew(reservation: Reservation): Promise<boolean> {
    return (await this.scripts.renew(reservation.id, this.settings.leaseMs)) > 0;
  }

  /**
   * Ends a call. A settle with usage waits up to {@link SETTLE_WAIT_MS} for others (or for the
   * next acquire, which takes it along); a keep or release goes at the end of the turn and takes
   * waiting settles along: one command for all.
   */
  private end(
    reservation: Reservation,
    mode: 'usage' | 'keep' | 'release',
    input: number,
    output: number,
    restamp: boolean,
    reportedOutput = -1,
    micros = -1,
    parts?: readonly (readonly [number, number])[],
  ): Promise<SettleResult> {
    // A waiter of this process sleeps: the budget and slot go back now, and it wakes at once
    // (its attempt goes behind this end on the same connection), not when the wake-up comes
    // back through Redis.
    const waiting = this.wakeUps.sleeping;
    const ended = this.ends.push(
      {
        id: reservation.id,
        mode,
        input,
        output,
        restamp,
        reported: reportedOutput,
        micros,
        ...(parts?.length ? { parts } : {}),
      },
      mode !== 'usage' || waiting,
    );
    if (waiting) this.wakeUps.wakeHere();
    // A stamp not sent yet is the settle's to make (it stamps an unstamped call), or, for a call
    // given back, nobody's.
    this.stamps.withdraw(
      (id) => id === reservation.id,
      () => ended.then(() => undefined),
    );
    return ended;
  }

  /**
   * Replaces the estimate with the provider's usage (output only under `actual` accounting),
   * and its money with `usage.costMicros` in the same step (absent: the worst case stays).
   */
  settle(
    reservation: Reservation,
    usage: Usage,
  ): Promise<{ known: boolean; inputDelta: number; outputDelta: number }> {
    // Checked before anything is sent: a settle runs in one script with the other ends
    // gathered with it, and a count Redis cannot add would fail it half-way for all of them.
    const bad = usageError(usage);
    if (bad) return Promise.reject(bad);
    const actual = this.outputAccounting === 'actual';
    return this.end(
      reservation,
      'usage',
      usage.inputTokens,
      actual ? usage.outputTokens : -1,
      actual,
      usage.outputTokens,
      usage.costMicros ?? -1,
      actual ? usage.outputParts?.map((p) => [Math.round(p.agoMs), p.tokens] as const) : undefined,
    );
  }

  /** The call may have reached the provider, no usage came back: estimate and money's worst case stay. */
  async keep(reservation: Reservation): Promise<void> {
    await this.end(reservation, 'keep', -1, -1, false);
  }

  /** The call never reached the provider: the whole reservation comes back, money too. */
  async release(reservation: Reservation): Promise<void> {
    await this.end(reservation, 'release', -1, -1, false);
  }

  /** Sets the shared pause to at least `ms` from now (Redis time); returns when it ends. */
  async pauseFor(ms: number): Promise<number> {
    if (!(ms >= 0)) throw new TypeError(`pause must be a number of ms from 0 up, got ${ms}`);
    return this.scripts.pause(Math.ceil(ms));
  }

  /**
   * Takes the provider's rate-limit headers: when they report less room than the window
   * believes, the difference is counted as another client's spend until the provider's reset.
   * What was certainly another client's is held until then (the highest reading, then the
   * highest since); what may have been our own calls racing their headers counts only until
   * the next reading (`observe-5.lua` says why).
   */
  observe(
    headers: HeaderSource | undefined,
    scope: string = GLOBAL_SCOPE,
    of?: Reservation,
    ageMs = 0,
  ): Promise<void> {
    return this.observeReading(readRateLimitHeaders(headers), scope, of, ageMs);
  }

  /**
   * {@link observe} with the headers already read (`readRateLimitHeaders`). `of` is the call
   * whose response brought them: when it went as a probe, the calls held for its reading go.
   * `ageMs`: how long ago the provider took the reading, i.e. admitted that call (for a call
   * not streamed, its whole duration): calls that left the window or gave output back since
   * are counted as the provider counted them then.
   */
  async observeReading(
    reading: ProviderReading,
    scope: string = GLOBAL_SCOPE,
    of?: Reservation,
    ageMs = 0,
  ): Promise<void> {
    if (!DIMENSIONS.some((d) => reading[d.name])) return;
    // A reading counts as ours only the calls stamped (or marked begun) before it, with what they
    // were settled at: the ends and stamps still gathered go first, on the same connection, so
    // Redis runs them first. An ended call's settle stamps it if its stamp was left to it; and a
    // call settled after the reading would leave its estimate in the window where the provider
    // counted its usage, hiding as much of another client's spend. (A call's own settle is not
    // gathered yet: the worker sends it after the call's reading.)
    this.ends.flush();
    this.stamps.flush();
    await this.scripts.observe({
      windowMs: this.windowArg,
      marginMs: this.settings.windowMarginMs,
      scope,
      reading,
      of: of?.id ?? '',
      channel: this.wakeChannel,
      ageMs: Math.max(0, Math.round(ageMs)),
    });
  }

  /** Records this limiter's settings so status and the dashboard can show them. */
  async publishConfig(): Promise<void> {
    await this.settings.redis.set(
      this.keys.config,
      JSON.stringify({
        windowMs: this.windowMs,
        windowMarginMs: this.settings.windowMarginMs,
        limits: this.settings.limits,
        scopes: this.settings.scopes,
        concurrency: this.concurrency,
        headroom: this.headroom,
        outputAccounting: this.outputAccounting,
        probeMs: this.probeMs,
      }),
    );
  }

  /**
   * Drops every reservation that has left the window and every lapsed lease (each script call
   * drops at most 500, so it loops). Acquires prune as they go; an idle worker calls this so the
   * limiter's keys shrink to nothing one window after the last call. Resolves with Redis time.
   */
  async prune(windowPlusMarginMs: number = this.windowArg): Promise<number> {
    for (let i = 0; ; i++) {
      const { now, dropped } = await this.scripts.prune(windowPlusMarginMs);
      if (dropped < 500 || i >= 1_000) return now;
    }
  }

  /**
   * The current use of every scope, the pause, slots in flight and counters. Reads only: what
   * has left the window is left out, not dropped (see `reader.ts`).
   */
  snapshot(): Promise<LimiterSnapshot> {
    return readSnapshot({
      redis: this.settings.redis,
      keys: this.keys,
      windowMs: this.settings.windowGiven ? this.windowMs : undefined,
      marginMs: this.settings.windowMarginMs,
      limits: this.settings.limits,
      scopeLimits: this.settings.scopes,
      concurrency: this.concurrency,
      clock: this.settings.clock,
    });
  }

  /** Deletes every key of this limiter (tests, `llmq` obliterate). */
  async destroy(): Promise<void> {
    await this.settings.redis.del(...this.allKeys);
  }
}
