import { randomUUID } from 'node:crypto';
import { moneyDenial } from '../budgets.ts';
import { deploymentScopeAmong } from '../deployment-scope.ts';
import { dimensionOfLua } from '../dimensions.ts';
import { CostExceedsLimitError, LimiterUnavailableError } from '../errors.ts';
import { CallHandle, Recorder } from './call.ts';
import { type LimiterKeys, limiterKeys, pauseKeyOf, wakeChannel } from './limiter-keys.ts';
import { Line, type LineRequest, waitInLine } from './line.ts';
import {
  type AcquireOptions,
  checkAttempt,
  checkCost,
  type LimiterOptions,
  type LimiterSettings,
  limitsOf,
  resolveLimiterOptions,
  scopeList,
  scriptScopes,
  viewScopes,
} from './options.ts';
import { readSnapshot, scopeOf } from './reader.ts';
import { LimiterScripts } from './scripts.ts';
import {
  type Along,
  type Charge,
  type Cost,
  type Decision,
  GLOBAL_SCOPE,
  type LimiterSnapshot,
  type OutputAccounting,
  type Reservation,
  type ScopeSnapshot,
} from './types.ts';
import { WakeUps } from './wake.ts';

export type { AcquireOptions, LimiterOptions };

/**
 * The most calls one acquire is asked to admit (its call and the first of `more`), whatever a
 * round asks for (a worker's concurrency of 200 would ask for 200): its argument and the fetches
 * riding with it stay bounded. How long it may run admitting them is `admitBudgetMs`'s; the
 * rest go in the round's next acquire.
 */
export const MAX_PER_ACQUIRE = 64;

/** The reason of a denial that only says how long to wait, by acquire's code. */
const DENIAL = { 1: 'queued', 2: 'paused', 4: 'concurrency', 8: 'taken' } as const;

/**
 * The shared budget of every worker process (docs/limiter.md): our own window of reservations
 * and the provider's projected view per scope and dimension, leased slots, a shared pause and
 * a fair line, all in Redis, decided by Lua scripts on Redis's clock.
 */
export class Limiter {
  readonly windowMs: number;
  readonly concurrency: number;
  readonly headroom: number;
  readonly outputAccounting: OutputAccounting;
  /** The options, defaults filled in. */
  private readonly settings: LimiterSettings;
  private readonly keys: LimiterKeys;
  private readonly scripts: LimiterScripts;
  private readonly wakeUps: WakeUps;
  private readonly recorder: Recorder;

  constructor(options: LimiterOptions) {
    const o = resolveLimiterOptions(options);
    this.settings = o;
    this.windowMs = o.windowMs;
    this.concurrency = o.concurrency;
    this.headroom = o.headroom;
    this.outputAccounting = o.outputAccounting;
    const channel = wakeChannel(o.names);
    this.wakeUps = new WakeUps(o.subscriber, channel);
    this.keys = limiterKeys(o.names);
    this.scripts = new LimiterScripts(o.redis, this.keys, o.commandTimeoutMs, o.clock);
    const { windowMs, outputAccounting } = o;
    const { scripts, wakeUps } = this;
    this.recorder = new Recorder(scripts, windowMs, channel, outputAccounting, wakeUps, o.clock);
  }

  /** Every key the limiter writes (for cleanup and for the cluster hash-tag test). */
  get allKeys(): readonly string[] {
    const pauses = Object.keys(this.settings.scopes).flatMap((s) =>
      deploymentScopeAmong([s]) ? [pauseKeyOf(this.keys, [s])] : [],
    );
    return [...Object.values(this.keys), ...pauses];
  }

  private async attempt(
    ticket: string,
    r: Pick<LineRequest, 'cost' | 'scopes' | 'priority' | 'more'>,
    queue: boolean,
    more: readonly { ticket: string; cost: Charge }[] = [],
    along?: Along,
  ): Promise<Decision & { more?: Reservation[] }> {
    checkAttempt(r.cost, more, r.priority);
    const extras = more.slice(0, MAX_PER_ACQUIRE - 1);
    // What calls told us in this turn goes first (same connection, so Redis runs it first): a
    // worker that reserves for its next job as the last one ends finds its budget and slot.
    this.recorder.flush();
    const s = this.settings;
    const args = {
      ...{ windowMs: s.windowMs, headroom: s.headroom, leaseMs: s.leaseMs, queue, ticket },
      ...{ ticketTtlMs: Math.max(5_000, s.maxPollMs * 5), concurrency: s.concurrency },
      budgetUs: Math.round(s.admitBudgetMs * 1000),
      ...{ channel: wakeChannel(s.names), priority: r.priority, cost: r.cost },
      scopes: scriptScopes(s, r.scopes),
      extras: extras.map((m) => ({
        ...m,
        scopes: m.cost.scopes && scriptScopes(s, m.cost.scopes),
      })),
    };
    const reply = await this.scripts.acquire(args, along);
    return this.decide(reply, ticket, r, extras);
  }

  /** Acquire's reply (see acquire-13.lua's header) as a decision; throws when it never fits. */
  private decide(
    [code, a, b, c, d]: (number | string)[],
    ticket: string,
    r: Pick<LineRequest, 'cost' | 'scopes'>,
    more: readonly { ticket: string; cost: Charge }[],
  ): Decision & { more?: Reservation[] } {
    const s = this.settings;
    const dimension = (v: unknown) => dimensionOfLua(String(v)) ?? 'tokens';
    const reservation = (id: string, cost: Charge, at: number): Reservation => {
      const scopes = scopeList(cost.scopes ?? r.scopes);
      return { id, cost, scopes, admittedAt: at, leaseExpiresAt: at + s.leaseMs };
    };
    switch (Number(code)) {
      case 0:
        return {
          ok: true,
          reservation: reservation(ticket, r.cost, Number(a)),
          more: more.slice(0, Number(c ?? 0)).map((m) => reservation(m.ticket, m.cost, Number(a))),
        };
      case 1:
      case 2:
      case 4:
      case 8: {
        // A 4 with a scope: that scope's calls waiting for their first answer hold its slots.
        const scope = b === undefined || b === null ? {} : { scope: String(b) };
        return {
          ok: false,
          reason: DENIAL[Number(code) as 1 | 2 | 4 | 8],
          waitMs: Number(a),
          ...scope,
        };
      }
      case 3: {
        const scope = String(b);
        return { ok: false, reason: 'budget', waitMs: Number(a), scope, dimension: dimension(c) };
      }
      case 5: {
        const limit = limitsOf(s, String(a))[dimension(b)] ?? Number(d);
        throw new CostExceedsLimitError(String(a), dimension(b), Number(c), limit);
      }
      case 7:
        return moneyDenial(r.cost.money, {
          budget: String(a),
          period: b === 'day' ? 'day' : 'month',
          spent: Number(c),
          limit: Number(d),
        });
      default:
        throw new LimiterUnavailableError(
          `unexpected answer ${JSON.stringify([code, a, b, c, d])} from acquire`,
        );
    }
  }

  /** One attempt, keeping no place in line; throws {@link CostExceedsLimitError} if it never fits. */
  tryAcquire(
    cost: Charge,
    options: { scopes?: readonly string[]; priority?: number } = {},
  ): Promise<Decision> {
    const r = { cost, scopes: options.scopes ?? [], priority: options.priority ?? 100, more: [] };
    return this.attempt(randomUUID(), r, false);
  }

  /**
   * Waits in line (priority, then arrival, across every process) until the cost fits every
   * dimension of every scope and a concurrency slot is free, then reserves it. Throws
   * {@link CostExceedsLimitError} when it can never fit, `LimiterUnavailableError` when Redis
   * cannot answer (nothing is reserved then), and the signal's reason when aborted.
   */
  async acquire(cost: Charge, options: AcquireOptions = {}): Promise<Reservation> {
    const { scopes = [], priority = 100 } = options;
    const [first] = await waitInLine(this.line(cost, { scopes, priority }), options);
    return first as Reservation;
  }

  /** A place in the fair line that its caller drives (see {@link Line}). */
  line(cost: Charge, options: Partial<LineRequest> = {}): Line {
    return new Line(
      {
        attempt: (ticket, r, tickets, along) => this.attempt(ticket, r, true, tickets, along),
        sleepOrWake: (ms, wakeable, signal) => this.wakeUps.sleep(ms, wakeable, signal),
        cancel: (ticket) => this.scripts.cancel(ticket).then(() => {}),
        maxPollMs: this.settings.maxPollMs,
      },
      { cost, scopes: [], priority: 100, more: [], ...options },
    );
  }

  /** An admitted call's handle ({@link CallHandle}); `scope`: the one its readings describe. */
  call(reservation: Reservation, scope: string = GLOBAL_SCOPE): CallHandle {
    return new CallHandle(this.recorder, reservation, scope);
  }

  /** Changes an open reservation's cost, not its stamp or slot (the job taken costs no more). */
  async adjust(reservation: Reservation, cost: Cost): Promise<Reservation> {
    checkCost(cost);
    const was = reservation.cost;
    if (cost.inputTokens !== was.inputTokens || cost.outputTokens !== was.outputTokens)
      await this.scripts.adjust(reservation.id, cost.inputTokens, cost.outputTokens);
    return { ...reservation, cost: { ...cost, requests: reservation.cost.requests } };
  }

  /** Extends the lease of a call in flight; false when the lease was already lost. */
  async renew(reservation: Reservation): Promise<boolean> {
    return (await this.scripts.renew(reservation.id, this.settings.leaseMs, this.windowMs)) > 0;
  }

  /** Gives back a reservation that no call used: its budget, slot and money. */
  async release(reservation: Reservation): Promise<void> {
    await this.call(reservation).abandoned();
  }

  /** Pauses for at least `ms` (a deployment's scope among `scopes`: it only); resolves with its end. */
  async pauseFor(ms: number, scopes: readonly string[] = []): Promise<number> {
    if (!(ms >= 0)) throw new TypeError(`pause must be a number of ms from 0 up, got ${ms}`);
    return Number(await this.recorder.push({ kind: 'pause', ms: Math.ceil(ms), scopes }));
  }

  /** Until when a deployment's pause (or, with no deployment scope, the queue's) holds; 0: none. */
  async pausedUntil(scopes: readonly string[] = []): Promise<number> {
    return Number((await this.settings.redis.get(pauseKeyOf(this.keys, scopes))) ?? 0);
  }

  /**
   * Drops what left the window and lapsed leases (a bounded number a run, looping until a run
   * drops none); resolves with Redis time.
   */
  async prune(): Promise<number> {
    for (let i = 0; ; i++) {
      const { now, dropped } = await this.scripts.record({}, this.windowMs, '', 'reserve');
      if (dropped === 0 || i >= 1_000) return now;
    }
  }

  /** Records this limiter's settings so status and the dashboard can show them. */
  async publishConfig(): Promise<void> {
    const s = this.settings;
    await s.redis.set(
      this.keys.config,
      JSON.stringify({
        windowMs: this.windowMs,
        limits: s.limits,
        scopes: s.scopes,
        concurrency: this.concurrency,
        headroom: this.headroom,
        outputAccounting: this.outputAccounting,
      }),
    );
  }

  /**
   * Each scope's use, the provider's projected view, a call's room (at `headroom`, default this
   * limiter's), the pause, slots and counters. Reads only.
   */
  snapshot(o: { readonly headroom?: number } = {}): Promise<LimiterSnapshot> {
    const settings = { ...this.settings, headroom: o.headroom ?? this.headroom };
    return readSnapshot(settings, this.keys, this.scripts);
  }

  /**
   * These scopes' use as {@link snapshot} shows it, in one read-only script (a pool's room):
   * `model`, the model scope the call is charged to, whose fresh bucket may cover the others.
   */
  async scopeUse(scopes: readonly string[], model?: string): Promise<ScopeSnapshot[]> {
    const { windowMs, headroom } = this;
    const args = { windowMs, headroom, scopes: viewScopes(this.settings, scopes), model };
    const view = await this.scripts.view(args);
    return scopes.map((s) => scopeOf(s, view, this.settings.scopes[s] ?? {}));
  }

  /** Sends what is gathered, and stops listening for wake-ups (the connections are the caller's). */
  async close(): Promise<void> {
    this.recorder.flush();
    await this.wakeUps.close();
  }

  /** Deletes every key of this limiter (tests, `llmq` obliterate). */
  async destroy(): Promise<void> {
    await this.settings.redis.del(...this.allKeys);
  }
}
