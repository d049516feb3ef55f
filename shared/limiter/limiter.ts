import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { Batcher } from '../batcher.ts';
import { CostExceedsLimitError, LimiterUnavailableError } from '../errors.ts';
import type { QueueNames } from '../keys.ts';
import { DIMENSIONS } from '../dimensions.ts';
import { type LimiterKeys, limiterKeys, wakeChannel } from './limiter-keys.ts';
import {
  type HeaderSource,
  type ProviderDimension,
  type ProviderReading,
  readRateLimitHeaders,
} from './provider-headers.ts';
import { readSnapshot } from './reader.ts';
import {
  AcquireCode,
  LimiterScripts,
  type ScriptReading,
  type ScriptScope,
  type SettleCall,
  type SettleResult,
} from './scripts.ts';
import { Line, type LineRequest } from './ticket.ts';
import {
  type Cost,
  type Decision,
  type DimensionLimits,
  GLOBAL_SCOPE,
  type LimiterSnapshot,
  type Reservation,
  type Usage,
} from './types.ts';

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

export interface LimiterOptions {
  /** A connection of its own is best; commands fail fast when it is not ready. */
  readonly redis: Redis;
  /** Prefix and queue: the limiter's keys share the queue's hash tag. */
  readonly names: QueueNames;
  /** The provider's window. @default 60_000 */
  readonly windowMs?: number;
  /** Limits of the global scope (the provider key). */
  readonly limits?: DimensionLimits;
  /** Limits of nested scopes, by name (`tenant:acme`, `feature:summaries`). */
  readonly scopes?: Readonly<Record<string, DimensionLimits>>;
  /** Calls in flight across every process; 0 for no cap. @default 0 */
  readonly concurrency?: number;
  /** Share of each limit left unused. @default 0.01 */
  readonly headroom?: number;
  /** Added to the window, in ms. @default 50 */
  readonly windowMarginMs?: number;
  /** How long a slot and an open reservation live without renewal. @default 30_000 */
  readonly leaseMs?: number;
  /**
   * How the provider charges output: `actual` gives unused max_tokens back at settle and
   * restamps the reservation then (output is produced until the end). @default 'reserve'
   */
  readonly outputAccounting?: 'reserve' | 'actual';
  /** Injected time in ms for tests; by default every script reads Redis's `TIME`. */
  readonly clock?: () => number;
  /** The longest a waiter sleeps between two attempts. @default 1_000 */
  readonly maxPollMs?: number;
  /**
   * Probes: after waiting for budget while another client's spend is counted (provider
   * feedback), the first call admitted when room comes back goes alone, and the others wait
   * for the provider's reading of it (or its end) up to this long, so that room the other
   * client took meanwhile is known before the rest is spent. 0: no probes.
   * @default a tenth of the window, at most the lease
   */
  readonly probeMs?: number;
  /** How long a command may take before the limiter gives up (fails closed). @default 5_000 */
  readonly commandTimeoutMs?: number;
  /**
   * A connection of its own (it enters subscriber mode) on which the limiter hears every
   * settle and release of any process, so a waiter wakes as soon as budget or a slot comes back
   * instead of at its next poll. Not owned: close it after {@link Limiter.close}.
   */
  readonly subscriber?: Redis;
}

export interface AcquireOptions {
  /** Nested scopes besides the global one. */
  readonly scopes?: readonly string[];
  /** 1 is the most urgent. @default 100 */
  readonly priority?: number;
  readonly signal?: AbortSignal;
  /**
   * Called after each denial, before sleeping. To stop waiting, abort the signal; a caller that
   * decides per denial drives a {@link Limiter.line} instead.
   */
  readonly onDenied?: (d: Decision & { ok: false }) => void;
  /**
   * Called before each new attempt while waiting; may return a new cost and priority (another
   * job came to the head of the queue).
   */
  readonly onWait?: (d: Decision & { ok: false }) =>
    | Promise<
        | {
            cost?: Cost;
            priority?: number;
            scopes?: readonly string[];
            more?: readonly Cost[];
            backfill?: number;
          }
        | undefined
      >
    | undefined;
}

/** {@link Limiter.acquireMany}'s options: those of `acquire`, and the calls queued behind. */
export interface AcquireManyOptions extends AcquireOptions {
  /**
   * The costs of the calls queued behind this one, charged to the same scopes. Once this one
   * is admitted, they are admitted in the same round trip, in order, while each fits at once
   * and nobody else waits in line.
   */
  readonly more?: readonly Cost[];
  /**
   * Backfill: while this call waits for budget, up to this many of `more` may go ahead of it,
   * each only when it fits now and this call would start no later for it (its spend must fit
   * beside this call's when this call's room comes), and a slot stays free for this call.
   * @default 0
   */
  readonly backfill?: number;
  /**
   * Takes the reservations made for calls of `more` that go ahead (`indexes` into `more`);
   * awaited before the next attempt. Required with `backfill`.
   */
  readonly onBackfill?: (reservations: Reservation[], indexes: number[]) => Promise<void>;
}


function effective(limit: number | undefined, headroom: number): number {
  if (limit === undefined || limit <= 0) return 0;
  return Math.max(1, Math.floor(limit * (1 - headroom)));
}

function checkScopeName(name: string): void {
  if (!/^[^|,\s]{1,200}$/.test(name)) {
    throw new TypeError(
      `scope name must be 1 to 200 characters without "|", "," or spaces, got ${JSON.stringify(name)}`,
    );
  }
}

/** Every scope a call is charged to, the global one first, each once (not twice when named twice). */
function scopeList(scopes: readonly string[]): string[] {
  return [...new Set([GLOBAL_SCOPE, ...scopes])];
}


function reservationOf(
  id: string,
  cost: Cost,
  scopes: readonly string[],
  admittedAt: number,
  leaseMs: number,
): Reservation {
  return { id, cost, scopes, admittedAt, leaseExpiresAt: admittedAt + leaseMs };
}

function checkCost(cost: Cost): void {
  for (const [k, v] of Object.entries(cost)) {
    if (!Number.isInteger(v) || v < 0)
      throw new TypeError(`cost.${k} must be a whole number from 0 up, got ${v}`);
  }
}

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
  private readonly redis: Redis;
  private readonly keys: LimiterKeys;
  private readonly limits: DimensionLimits;
  private readonly scopeLimits: Readonly<Record<string, DimensionLimits>>;
  private readonly marginMs: number;
  private readonly leaseMs: number;
  private readonly clock: (() => number) | undefined;
  private readonly maxPollMs: number;
  private readonly scripts: LimiterScripts;
  private readonly wakeChannel: string;
  private readonly subscriber: Redis | undefined;
  private readonly sleepers = new Set<() => void>();
  private readonly onMessage = (channel: string) => {
    if (channel !== this.wakeChannel) return;
    for (const wake of this.sleepers) wake();
  };
  private subscribed: Promise<unknown> | undefined;
  /** Whether the window was given; when not, snapshots use the window workers published. */
  private readonly windowGiven: boolean;
  /**
   * Stamps, and ends (settles, keeps, releases), gathered: each batch is one command. Stamps
   * wait up to LAZY_STAMP_MS when lazy, settles up to SETTLE_WAIT_MS.
   */
  private readonly stamps: Batcher<string, void>;
  private readonly ends: Batcher<SettleCall, SettleResult>;

  constructor(options: LimiterOptions) {
    this.redis = options.redis;
    this.windowGiven = options.windowMs !== undefined;
    this.windowMs = options.windowMs ?? 60_000;
    this.limits = options.limits ?? {};
    this.scopeLimits = options.scopes ?? {};
    this.concurrency = options.concurrency ?? 0;
    this.headroom = options.headroom ?? 0.01;
    this.marginMs = options.windowMarginMs ?? 50;
    this.leaseMs = options.leaseMs ?? 30_000;
    this.outputAccounting = options.outputAccounting ?? 'reserve';
    this.clock = options.clock;
    this.maxPollMs = options.maxPollMs ?? 1_000;
    this.probeMs = options.probeMs ?? Math.min(this.leaseMs, Math.ceil(this.windowMs / 10));
    if (!(this.windowMs >= 1))
      throw new TypeError(`windowMs must be at least 1, got ${this.windowMs}`);
    if (!(this.headroom >= 0 && this.headroom < 1))
      throw new TypeError(`headroom must be from 0 to below 1, got ${this.headroom}`);
    if (!(this.leaseMs >= 100))
      throw new TypeError(`leaseMs must be at least 100, got ${this.leaseMs}`);
    if (!Number.isSafeInteger(this.probeMs) || this.probeMs < 0)
      throw new TypeError(`probeMs must be a whole number of ms from 0 up, got ${this.probeMs}`);
    if (!Number.isInteger(this.concurrency) || this.concurrency < 0) {
      throw new TypeError(`concurrency must be a whole number from 0 up, got ${this.concurrency}`);
    }
    for (const name of Object.keys(this.scopeLimits)) checkScopeName(name);
    this.wakeChannel = wakeChannel(options.names);
    this.subscriber = options.subscriber;
    this.keys = limiterKeys(options.names);
    this.scripts = new LimiterScripts(
      this.redis,
      this.keys,
      options.commandTimeoutMs ?? 5_000,
      this.clock,
    );
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
    return this.windowMs + this.marginMs;
  }


  /** Every scope charged, each with its limits less headroom, by short dimension name. */
  private scriptScopes(scopes: readonly string[]): ScriptScope[] {
    return scopeList(scopes).map((name) => {
      checkScopeName(name);
      const l = name === GLOBAL_SCOPE ? this.limits : (this.scopeLimits[name] ?? {});
      const limits: Record<string, number> = {};
      for (const d of DIMENSIONS) limits[d.lua] = effective(l[d.name], this.headroom);
      return { name, limits };
    });
  }

  private async attempt(
    ticket: string,
    cost: Cost,
    scopes: readonly string[],
    priority: number,
    queue: boolean,
    more: readonly { ticket: string; cost: Cost }[] = [],
    backfill = 0,
  ): Promise<Decision & { more?: Reservation[]; backfilled?: number[] }> {
    checkCost(cost);
    for (const m of more) checkCost(m.cost);
    if (!Number.isInteger(priority) || priority < 1 || priority > 2_097_152) {
      throw new TypeError(`priority must be a whole number from 1 to 2097152, got ${priority}`);
    }
    // Calls ended in this turn give their budget and slots back first (same connection, so Redis
    // runs them first): a worker that reserves for its next job as the last one ends finds them.
    this.ends.flush();
    const r = await this.scripts.acquire({
      windowMs: this.windowArg,
      ticket,
      priority,
      queue,
      leaseMs: this.leaseMs,
      ticketTtlMs: Math.max(5_000, this.maxPollMs * 5),
      concurrency: this.concurrency,
      cost,
      scopes: this.scriptScopes(scopes),
      extras: more,
      backfill,
      // Only a waiter that keeps its place in line goes as a probe.
      probeMs: this.probeMs,
    });
    switch (r.code) {
      case AcquireCode.Admitted: {
        const reservation = (id: string, c: Cost) =>
          reservationOf(id, c, scopeList(scopes), r.now, this.leaseMs);
        return {
          ok: true,
          reservation: reservation(ticket, cost),
          more: more.slice(0, r.extras).map((m) => reservation(m.ticket, m.cost)),
        };
      }
      case AcquireCode.Budget: {
        const { waitMs, scope, dimension, backfilled } = r;
        // Extras that went ahead (backfill), as indexes into `more`; only when there are any.
        const ahead = backfilled.length > 0 ? { backfilled } : {};
        return { ok: false, reason: 'budget', waitMs, scope, dimension, ...ahead };
      }
      case AcquireCode.NeverFits: {
        const limits = r.scope === GLOBAL_SCOPE ? this.limits : (this.scopeLimits[r.scope] ?? {});
        const limit = limits[r.dimension] ?? r.limit;
        throw new CostExceedsLimitError(r.scope, r.dimension, r.cost, limit);
      }
      default:
        return { ok: false, reason: DENIAL[r.code], waitMs: r.waitMs };
    }
  }

  /**
   * One attempt that does not keep a place in line: admitted now, or a denial saying how long
   * to wait. Throws {@link CostExceedsLimitError} when the cost can never fit.
   */
  tryAcquire(
    cost: Cost,
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
  async acquire(cost: Cost, options: AcquireOptions = {}): Promise<Reservation> {
    const [first] = await this.acquireMany(cost, options);
    return first as Reservation;
  }

  /**
   * A place in the fair line that its caller drives: attempt, then sleep for the denial's wait
   * (or until woken), possibly with a new cost, and leave when it stops waiting.
   */
  line(cost: Cost, options: Partial<LineRequest> = {}): Line {
    return new Line(
      {
        attempt: async (ticket, r, tickets) => {
          const d = await this.attempt(
            ticket,
            r.cost,
            r.scopes,
            r.priority,
            true,
            tickets,
            r.backfill,
          );
          if (d.ok || !d.backfilled?.length) return d;
          // Redis time is not in a denial's answer: admittedAt is only informative here.
          const now = Date.now();
          const ahead = d.backfilled.map((i) =>
            reservationOf(
              tickets[i]!.ticket,
              tickets[i]!.cost,
              scopeList(r.scopes),
              now,
              this.leaseMs,
            ),
          );
          return { ...d, ahead, aheadIndexes: d.backfilled };
        },
        sleepOrWake: (ms, wakeable, signal) => this.sleepOrWake(ms, wakeable, signal),
        cancel: (ticket) => this.cancel(ticket),
        maxPollMs: this.maxPollMs,
      },
      { cost, scopes: [], priority: 100, more: [], backfill: 0, ...options },
    );
  }

  /**
   * {@link acquire}, and in the same round trip as many of the calls queued behind it
   * (`options.more`) as fit at once: resolves with this call's reservation first, then one for
   * each of the first k of `more` admitted (possibly none). Built on {@link line}.
   */
  async acquireMany(cost: Cost, options: AcquireManyOptions = {}): Promise<Reservation[]> {
    const line = this.line(cost, {
      scopes: options.scopes ?? [],
      priority: options.priority ?? 100,
      more: options.more ?? [],
      backfill: options.onBackfill ? (options.backfill ?? 0) : 0,
    });
    try {
      for (;;) {
        options.signal?.throwIfAborted();
        const a = await line.attempt();
        if (a.ok) return a.reservations;
        if (a.ahead.length > 0) await options.onBackfill?.([...a.ahead], [...a.aheadIndexes]);
        options.onDenied?.(a.denial);
        await line.sleep(a, options.signal);
        const change = await options.onWait?.(a.denial);
        if (change) {
          const { backfill, ...rest } = change;
          line.update({
            ...Object.fromEntries(Object.entries(rest).filter(([, v]) => v !== undefined)),
            ...(backfill !== undefined && options.onBackfill ? { backfill } : {}),
          });
        }
      }
    } catch (err) {
      await line.leave().catch(() => {});
      // Aborted while asleep, the timer throws its own AbortError: throw the signal's reason,
      // as when aborted between two attempts.
      throw options.signal?.aborted ? options.signal.reason : err;
    }
  }

  /** Sleeps `ms`, or less when a settle or release anywhere frees budget (with a subscriber). */
  private async sleepOrWake(
    ms: number,
    wakeable: boolean,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    if (!this.subscriber || !wakeable) {
      await sleep(ms, undefined, signal ? { signal } : undefined);
      return;
    }
    if (!this.subscribed) {
      this.subscriber.on('message', this.onMessage);
      this.subscribed = this.subscriber.subscribe(this.wakeChannel).catch(() => {
        this.subscribed = undefined;
      });
    }
    const timer = new AbortController();
    const onAbort = () => timer.abort();
    signal?.addEventListener('abort', onAbort, { once: true });
    // Several waiters of one process must not all hit Redis at the same instant.
    const wake = () => setTimeout(() => timer.abort(), Math.random() * 5);
    this.sleepers.add(wake);
    try {
      await sleep(ms, undefined, { signal: timer.signal }).catch(() => {});
      signal?.throwIfAborted();
    } finally {
      this.sleepers.delete(wake);
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /**
   * Sends the stamps and ends still gathered, and stops listening for wake-ups (the connections
   * stay the caller's to close).
   */
  async close(): Promise<void> {
    // What is gathered goes now, ahead of whatever the owner sends next (QUIT, say).
    this.ends.flush();
    this.stamps.flush();
    if (!this.subscriber || !this.subscribed) return;
    this.subscriber.off('message', this.onMessage);
    await this.subscriber.unsubscribe(this.wakeChannel).catch(() => {});
    this.subscribed = undefined;
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
    return (await this.scripts.renew(reservation.id, this.leaseMs)) > 0;
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
  ): Promise<SettleResult> {
    const ended = this.ends.push(
      { id: reservation.id, mode, input, output, restamp, reported: reportedOutput },
      mode !== 'usage',
    );
    // A stamp not sent yet is the settle's to make (it stamps an unstamped call), or, for a call
    // given back, nobody's.
    this.stamps.withdraw(
      (id) => id === reservation.id,
      () => ended.then(() => undefined),
    );
    return ended;
  }

  /**
   * Replaces the estimate with the provider's usage: an underestimate is charged, an
   * overestimate given back. Output is reconciled only under `actual` output accounting.
   */
  settle(
    reservation: Reservation,
    usage: Usage,
  ): Promise<{ known: boolean; inputDelta: number; outputDelta: number }> {
    // Checked before anything is sent: a settle runs in one script with the other ends
    // gathered with it, and a count Redis cannot add would fail it half-way for all of them.
    for (const [name, v] of [
      ['inputTokens', usage.inputTokens],
      ['outputTokens', usage.outputTokens],
    ] as const) {
      if (!Number.isSafeInteger(v) || v < 0) {
        return Promise.reject(
          new TypeError(
            `settle: usage.${name} must be a whole number of tokens from 0 up, got ${v}; pass the provider's usage, or call keep() when it is not known`,
          ),
        );
      }
    }
    const actual = this.outputAccounting === 'actual';
    return this.end(
      reservation,
      'usage',
      usage.inputTokens,
      actual ? usage.outputTokens : -1,
      actual,
      usage.outputTokens,
    );
  }

  /** The call may have reached the provider but no usage came back: the estimate stays charged. */
  async keep(reservation: Reservation): Promise<void> {
    await this.end(reservation, 'keep', -1, -1, false);
  }

  /** The call never reached the provider: the whole reservation comes back. */
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
  ): Promise<void> {
    return this.observeReading(readRateLimitHeaders(headers), scope, of);
  }

  /**
   * {@link observe} with the headers already read (`readRateLimitHeaders`). `of` is the call
   * whose response brought them: when it went as a probe, the calls held for its reading go.
   */
  async observeReading(
    reading: ProviderReading,
    scope: string = GLOBAL_SCOPE,
    of?: Reservation,
  ): Promise<void> {
    const readings: Partial<Record<ProviderDimension, ScriptReading>> = {};
    for (const d of DIMENSIONS) {
      const r = reading[d.name];
      if (r) readings[d.name] = { limit: r.limit, remaining: r.remaining, reset: r.resetMs ?? -1 };
    }
    if (Object.keys(readings).length === 0) return;
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
      marginMs: this.marginMs,
      scope,
      readings,
      of: of?.id ?? '',
      channel: this.wakeChannel,
    });
  }

  /** Records this limiter's settings so status and the dashboard can show them. */
  async publishConfig(): Promise<void> {
    await this.redis.set(
      this.keys.config,
      JSON.stringify({
        windowMs: this.windowMs,
        windowMarginMs: this.marginMs,
        limits: this.limits,
        scopes: this.scopeLimits,
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
      redis: this.redis,
      keys: this.keys,
      windowMs: this.windowGiven ? this.windowMs : undefined,
      marginMs: this.marginMs,
      limits: this.limits,
      scopeLimits: this.scopeLimits,
      concurrency: this.concurrency,
      clock: this.clock,
    });
  }

  /** Deletes every key of this limiter (tests, `llmq` obliterate). */
  async destroy(): Promise<void> {
    await this.redis.del(...this.allKeys);
  }
}
