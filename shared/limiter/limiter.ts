import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { ReplyError } from 'ioredis';
import { Batcher } from '../batcher.ts';
import { CostExceedsLimitError, LimiterUnavailableError } from '../errors.ts';
import { llmqKey, type QueueNames } from '../keys.ts';
import { loadLuaScripts, runLua } from '../lua-scripts.ts';
import { isCluster, type RedisClient } from '../redis.ts';
import { slotMaster } from '../redis-slot.ts';
import {
  type HeaderSource,
  type ProviderDimension,
  type ProviderReading,
  readRateLimitHeaders,
} from './provider-headers.ts';
import {
  type Cost,
  type Decision,
  type Dimension,
  type DimensionLimits,
  GLOBAL_SCOPE,
  type HistoryPoint,
  type LimiterSnapshot,
  type Reservation,
  type ScopeSnapshot,
  type Usage,
} from './types.ts';

const SCRIPTS = loadLuaScripts(new URL('./lua', import.meta.url).pathname);

/** The order of dimensions in every script: requests, input, output, total tokens. */
const DIMS: readonly Dimension[] = ['requests', 'inputTokens', 'outputTokens', 'tokens'];
const LUA_DIM: Record<string, Dimension> = {
  req: 'requests',
  in: 'inputTokens',
  out: 'outputTokens',
  tok: 'tokens',
};
const HISTORY_BUCKET_MS = 10_000;

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
  readonly redis: RedisClient;
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
  readonly subscriber?: RedisClient;
}

export interface AcquireOptions {
  /** Nested scopes besides the global one. */
  readonly scopes?: readonly string[];
  /** 1 is the most urgent. @default 100 */
  readonly priority?: number;
  readonly signal?: AbortSignal;
  /**
   * Called before each new attempt while waiting; may return a new cost and priority (the
   * worker found another job at the head of the queue).
   */
  /**
   * Called after each denial, before sleeping; throw to stop waiting (the worker steps around a
   * job that only its own tenant's budget holds back). The place in line is given up.
   */
  readonly onDenied?: (d: Decision & { ok: false }) => void;
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

interface EndItem {
  readonly id: string;
  readonly mode: 'usage' | 'keep' | 'release';
  readonly input: number;
  readonly output: number;
  readonly restamp: boolean;
  readonly reportedOutput: number;
}

interface EndResult {
  readonly known: boolean;
  readonly inputDelta: number;
  readonly outputDelta: number;
}

function effective(limit: number | undefined, headroom: number): number {
  if (limit === undefined || limit <= 0) return 0;
  return Math.max(1, Math.floor(limit * (1 - headroom)));
}

/**
 * Another client's spend counted now for `field` of the ext hash: the held reading while it
 * lasts, then the one that follows it, or the latest reading when that is higher (`foreign_of`
 * in the Lua include).
 */
function foreignNow(ext: Record<string, string>, field: string, now: number): number {
  const live = (f: string) => (Number(ext[`${f}|until`] ?? 0) > now ? Number(ext[f] ?? 0) : 0);
  const held = Number(ext[`${field}|until`] ?? 0) > now ? live(field) : live(`${field}|next`);
  return Math.max(held, live(`${field}|last`));
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

/**
 * Why commands cannot be answered now, from a lost connection until ioredis is ready again; or
 * undefined. Between two retries it is 'connecting' for a moment, as on the first connection
 * (whose commands should wait for it); its retry counter, reset when ready, tells the two apart.
 */
function lostConnection(redis: RedisClient, key: string): string | undefined {
  if (isCluster(redis) && redis.status === 'ready') {
    // A Cluster stays ready while one master is replaced: look at the one serving this key.
    const master = slotMaster(redis, key);
    if (!master) return 'Redis Cluster has no reachable master for this queue (failover?)';
    return lostConnection(master, key);
  }
  const s = redis.status;
  const lost = `Redis connection is ${s}`;
  if (s === 'reconnecting' || s === 'end' || s === 'close') return lost;
  const retries = (redis as unknown as { retryAttempts?: number }).retryAttempts ?? 0;
  return (s === 'connecting' || s === 'connect') && retries > 0 ? lost : undefined;
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
  private readonly redis: RedisClient;
  private readonly keys: Record<
    | 'log'
    | 'res'
    | 'slots'
    | 'waiters'
    | 'waitexp'
    | 'seq'
    | 'pause'
    | 'tot'
    | 'ext'
    | 'stats'
    | 'hist'
    | 'config',
    string
  >;
  private readonly limits: DimensionLimits;
  private readonly scopeLimits: Readonly<Record<string, DimensionLimits>>;
  private readonly marginMs: number;
  private readonly leaseMs: number;
  private readonly clock: (() => number) | undefined;
  private readonly maxPollMs: number;
  private readonly commandTimeoutMs: number;
  private readonly wakeChannel: string;
  private readonly subscriber: RedisClient | undefined;
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
  private readonly ends: Batcher<EndItem, EndResult>;

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
    this.commandTimeoutMs = options.commandTimeoutMs ?? 5_000;
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
    const k = (part: string) => llmqKey(options.names, 'limiter', part);
    this.wakeChannel = k('wake');
    this.subscriber = options.subscriber;
    this.keys = {
      log: k('log'),
      res: k('res'),
      slots: k('slots'),
      waiters: k('waiters'),
      waitexp: k('waitexp'),
      seq: k('seq'),
      pause: k('pause'),
      tot: k('tot'),
      ext: k('ext'),
      stats: k('stats'),
      hist: k('hist'),
      config: k('config'),
    };
    this.stamps = new Batcher<string, void>(
      async (ids) => {
        // Under `actual` accounting the provider charges output until the end: the reservation
        // stays open (stamped at its renewed lease) until settle stamps it, or a call streaming
        // longer than the window would leave it before it is settled. It is only marked as begun.
        const mode = this.outputAccounting === 'actual' ? 'mark' : 'stamp';
        await this.run('start', [this.keys.log, this.keys.res], [this.now(), mode, ...ids]);
        return [];
      },
      { delayMs: LAZY_STAMP_MS },
    );
    this.ends = new Batcher(
      async (items) => {
        const k = this.keys;
        const args: (string | number)[] = [this.now(), HISTORY_BUCKET_MS, this.wakeChannel];
        for (const e of items)
          args.push(e.id, e.mode, e.input, e.output, e.restamp ? '1' : '0', e.reportedOutput);
        const r = (await this.run(
          'settle',
          [k.log, k.res, k.slots, k.tot, k.stats, k.hist],
          args,
        )) as number[];
        return items.map((_, i) => ({
          known: Number(r[i * 3]) === 1,
          inputDelta: Number(r[i * 3 + 1] ?? 0),
          outputDelta: Number(r[i * 3 + 2] ?? 0),
        }));
      },
      { delayMs: SETTLE_WAIT_MS },
    );
  }

  /** Every key the limiter writes (for cleanup and for the cluster hash-tag test). */
  get allKeys(): readonly string[] {
    return Object.values(this.keys);
  }

  private now(): string {
    return this.clock ? String(Math.floor(this.clock())) : '';
  }

  private get windowArg(): number {
    return this.windowMs + this.marginMs;
  }

  /**
   * Runs a script, failing closed. `undo` names a script that reverses it: when the command was
   * sent but no answer came (timeout, dropped connection), the command may still run later
   * (ioredis queues it, and resends unanswered ones after reconnecting) or may have run with
   * its answer lost, so the undo is queued behind it on the same connection, to run whenever
   * Redis answers again.
   */
  private async run(
    name: keyof typeof SCRIPTS | string,
    keys: string[],
    args: (string | number)[],
    undo?: { name: string; keys: string[]; args: (string | number)[] },
  ): Promise<unknown> {
    const script = SCRIPTS[name];
    if (!script) throw new Error(`no limiter script named ${name}`);
    const lost = lostConnection(this.redis, keys[0] ?? '');
    if (lost) {
      // Commands sent now would queue until Redis comes back: fail closed instead.
      throw new LimiterUnavailableError(lost);
    }
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        runLua(this.redis, script, keys, args).catch((err: unknown) => {
          // An error reply means Redis answered: nothing is left to undo.
          if (undo && err instanceof ReplyError) undo = undefined;
          throw err;
        }),
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () =>
              reject(
                new LimiterUnavailableError(
                  `no answer from Redis within ${this.commandTimeoutMs} ms`,
                ),
              ),
            this.commandTimeoutMs,
          );
        }),
      ]);
    } catch (err) {
      const u = undo;
      if (u) {
        const undoScript = SCRIPTS[u.name];
        if (undoScript) runLua(this.redis, undoScript, u.keys, u.args).catch(() => {});
      }
      if (err instanceof LimiterUnavailableError) throw err;
      throw new LimiterUnavailableError((err as Error).message, { cause: err });
    } finally {
      clearTimeout(timer);
    }
  }

  private scopeArgs(scopes: readonly string[]): (string | number)[] {
    const all = scopeList(scopes);
    const args: (string | number)[] = [all.length];
    for (const name of all) {
      checkScopeName(name);
      const l = name === GLOBAL_SCOPE ? this.limits : (this.scopeLimits[name] ?? {});
      args.push(name, ...DIMS.map((d) => effective(l[d], this.headroom)));
    }
    return args;
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
    const k = this.keys;
    // Calls ended in this turn give their budget and slots back first (same connection, so Redis
    // runs them first): a worker that reserves for its next job as the last one ends finds them.
    this.ends.flush();
    const reply = (await this.run(
      'acquire',
      [k.log, k.res, k.slots, k.waiters, k.waitexp, k.seq, k.pause, k.tot, k.ext, k.stats],
      [
        this.now(),
        this.windowArg,
        ticket,
        priority,
        queue ? '1' : '0',
        this.leaseMs,
        Math.max(5_000, this.maxPollMs * 5),
        this.concurrency,
        cost.requests,
        cost.inputTokens,
        cost.outputTokens,
        ...this.scopeArgs(scopes),
        more.length,
        ...more.flatMap((m) => [
          m.ticket,
          m.cost.requests,
          m.cost.inputTokens,
          m.cost.outputTokens,
        ]),
        backfill,
        // Only a waiter that keeps its place in line goes as a probe.
        this.probeMs,
      ],
      {
        name: 'abandon',
        keys: [k.log, k.res, k.slots, k.tot, k.stats, k.waiters, k.waitexp],
        args: [ticket, ...more.map((m) => m.ticket)],
      },
    )) as (number | string)[];
    const code = Number(reply[0]);
    const reservation = (id: string, c: Cost) =>
      reservationOf(id, c, scopeList(scopes), Number(reply[1]), this.leaseMs);
    switch (code) {
      case 0: {
        return {
          ok: true,
          reservation: reservation(ticket, cost),
          more: more.slice(0, Number(reply[3] ?? 0)).map((m) => reservation(m.ticket, m.cost)),
        };
      }
      case 1:
        return { ok: false, reason: 'queued', waitMs: Number(reply[1]) };
      case 2:
        return { ok: false, reason: 'paused', waitMs: Number(reply[1]) };
      case 3:
        return {
          ok: false,
          reason: 'budget',
          waitMs: Number(reply[1]),
          scope: String(reply[2]),
          dimension: LUA_DIM[String(reply[3])] ?? 'tokens',
          // Extras that went ahead (backfill), as indexes into `more`; only when there are any.
          ...(reply.length > 4 ? { backfilled: reply.slice(4).map((i) => Number(i) - 1) } : {}),
        };
      case 4:
        return { ok: false, reason: 'concurrency', waitMs: Number(reply[1]) };
      case 6:
        return { ok: false, reason: 'probe', waitMs: Number(reply[1]) };
      case 5: {
        const dim = LUA_DIM[String(reply[2])] ?? 'tokens';
        const scope = String(reply[1]);
        const limits = scope === GLOBAL_SCOPE ? this.limits : (this.scopeLimits[scope] ?? {});
        throw new CostExceedsLimitError(
          scope,
          dim,
          Number(reply[3]),
          limits[dim] ?? Number(reply[4]),
        );
      }
      default:
        throw new LimiterUnavailableError(
          `unexpected answer ${JSON.stringify(reply)} from the acquire script`,
        );
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
   * {@link acquire}, and in the same round trip as many of the calls queued behind it
   * (`options.more`) as fit at once: resolves with this call's reservation first, then one for
   * each of the first k of `more` admitted (possibly none).
   */
  async acquireMany(cost: Cost, options: AcquireManyOptions = {}): Promise<Reservation[]> {
    const ticket = randomUUID();
    let current = cost;
    let priority = options.priority ?? 100;
    let scopes = options.scopes ?? [];
    let more = options.more ?? [];
    let backfillMax = options.backfill ?? 0;
    try {
      for (;;) {
        options.signal?.throwIfAborted();
        const tickets = more.map((c) => ({ ticket: randomUUID(), cost: c }));
        const backfill = options.onBackfill ? backfillMax : 0;
        const d = await this.attempt(ticket, current, scopes, priority, true, tickets, backfill);
        if (d.ok) return [d.reservation, ...(d.more ?? [])];
        // Time spent taking the jobs that go ahead comes off the wait, so the head's next
        // attempt is not late for it.
        const deniedAt = performance.now();
        if (d.backfilled && d.backfilled.length > 0) {
          // Redis time is not in a denial's answer: admittedAt is only informative here.
          const now = Date.now();
          await options.onBackfill?.(
            d.backfilled.map((i) =>
              reservationOf(
                tickets[i]!.ticket,
                tickets[i]!.cost,
                scopeList(scopes),
                now,
                this.leaseMs,
              ),
            ),
            d.backfilled,
          );
        }
        options.onDenied?.(d);
        // Waiters behind the first in line wake just after it should have been admitted; a
        // little jitter keeps several processes from arriving at the same instant.
        const jitter = d.reason === 'queued' ? 2 + Math.random() * 8 : 0;
        const spent = performance.now() - deniedAt;
        const wait = Math.min(Math.max(d.waitMs - spent, 1) + jitter, this.maxPollMs);
        // A pause ends at a known time; budget and slots may come back sooner, at a settle.
        await this.sleepOrWake(wait, d.reason !== 'paused', options.signal);
        const change = await options.onWait?.(d);
        if (change?.cost) current = change.cost;
        if (change?.priority) priority = change.priority;
        if (change?.scopes) scopes = change.scopes;
        if (change?.more) more = change.more;
        if (change?.backfill !== undefined) backfillMax = change.backfill;
      }
    } catch (err) {
      await this.cancel(ticket).catch(() => {});
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
      this.subscriber.on('smessage', this.onMessage);
      this.subscribed = this.subscriber.ssubscribe(this.wakeChannel).catch(() => {
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
    this.subscriber.off('smessage', this.onMessage);
    await this.subscriber.sunsubscribe(this.wakeChannel).catch(() => {});
    this.subscribed = undefined;
  }

  private async cancel(ticket: string): Promise<void> {
    await this.run('cancel', [this.keys.waiters, this.keys.waitexp], [ticket]);
  }

  /**
   * Lowers (or raises, at the caller's risk) an open reservation's cost without changing its
   * stamp or slot: the worker got a job that costs no more than the one it reserved for.
   */
  async adjust(reservation: Reservation, cost: Cost): Promise<Reservation> {
    checkCost(cost);
    const k = this.keys;
    await this.run(
      'adjust',
      [k.res, k.tot, k.stats],
      [reservation.id, cost.inputTokens, cost.outputTokens],
    );
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
    const k = this.keys;
    const r = await this.run(
      'renew',
      [k.log, k.res, k.slots],
      [this.now(), reservation.id, this.leaseMs],
    );
    return Number(r) > 0;
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
  ): Promise<EndResult> {
    const ended = this.ends.push(
      { id: reservation.id, mode, input, output, restamp, reportedOutput },
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
    return Number(await this.run('pause', [this.keys.pause], [this.now(), Math.ceil(ms)]));
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
    const order: ProviderDimension[] = ['requests', 'inputTokens', 'outputTokens', 'tokens'];
    if (!order.some((d) => reading[d])) return;
    const args: (string | number)[] = [this.now(), this.windowArg, scope];
    for (const d of order) {
      const r = reading[d];
      args.push(r ? r.limit : -1, r ? r.remaining : -1, r?.resetMs ?? -1);
    }
    args.push(of?.id ?? '', this.wakeChannel, this.marginMs);
    const k = this.keys;
    // A reading counts as ours only the calls stamped (or marked begun) before it, with what they
    // were settled at: the ends and stamps still gathered go first, on the same connection, so
    // Redis runs them first. An ended call's settle stamps it if its stamp was left to it; and a
    // call settled after the reading would leave its estimate in the window where the provider
    // counted its usage, hiding as much of another client's spend. (A call's own settle is not
    // gathered yet: the worker sends it after the call's reading.)
    this.ends.flush();
    this.stamps.flush();
    await this.run('observe', [k.tot, k.ext, k.stats, k.log, k.res], args);
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
    const k = this.keys;
    for (let i = 0; ; i++) {
      const [now, dropped] = (await this.run(
        'prune',
        [k.log, k.res, k.slots, k.tot],
        [this.now(), windowPlusMarginMs],
      )) as [number, number];
      if (Number(dropped) < 500 || i >= 1_000) return Number(now);
    }
  }

  /** The current use of every scope, the pause, slots in flight and counters. */
  async snapshot(): Promise<LimiterSnapshot> {
    const k = this.keys;
    const config = await this.redis.get(k.config);
    const published = config
      ? (JSON.parse(config) as {
          windowMs?: number;
          windowMarginMs?: number;
          limits?: DimensionLimits;
          scopes?: Record<string, DimensionLimits>;
          concurrency?: number;
        })
      : {};
    const windowMs = this.windowGiven ? this.windowMs : (published.windowMs ?? this.windowMs);
    const marginMs = this.windowGiven
      ? this.marginMs
      : Math.max(this.marginMs, published.windowMarginMs ?? 0);
    const now = await this.prune(windowMs + marginMs);
    const [tot, ext, pause, inFlight, waiters, stats, hist] = (await this.redis
      .multi()
      .hgetall(k.tot)
      .hgetall(k.ext)
      .get(k.pause)
      .zcount(k.slots, now, '+inf')
      .zcard(k.waiters)
      .hgetall(k.stats)
      .hgetall(k.hist)
      .exec()
      .then((rows) =>
        (rows ?? []).map(([err, v]) => {
          if (err) throw new LimiterUnavailableError(err.message, { cause: err });
          return v;
        }),
      )) as [
      Record<string, string>,
      Record<string, string>,
      string | null,
      number,
      number,
      Record<string, string>,
      Record<string, string>,
    ];
    const limitsOf = (scope: string): DimensionLimits =>
      scope === GLOBAL_SCOPE
        ? Object.keys(this.limits).length > 0
          ? this.limits
          : (published.limits ?? {})
        : (this.scopeLimits[scope] ?? published.scopes?.[scope] ?? {});
    const names = new Set<string>([GLOBAL_SCOPE, ...Object.keys(this.scopeLimits)]);
    for (const f of Object.keys(tot)) names.add(f.split('|')[0]!);
    const scopes: ScopeSnapshot[] = [...names].map((scope) => {
      const dims = {} as Record<
        Dimension,
        { used: number; limit: number | undefined; foreign: number }
      >;
      for (const [lua, dim] of Object.entries(LUA_DIM)) {
        const f = `${scope}|${lua}`;
        dims[dim] = {
          used: Number(tot[f] ?? 0),
          limit: limitsOf(scope)[dim],
          foreign: foreignNow(ext, f, now),
        };
      }
      return { scope, dimensions: dims };
    });
    const n = (f: string) => Number(stats[f] ?? 0);
    const buckets = new Map<number, Record<string, number>>();
    for (const [f, v] of Object.entries(hist)) {
      const [at, name] = f.split('|') as [string, string];
      const b = buckets.get(Number(at)) ?? {};
      b[name] = Number(v);
      buckets.set(Number(at), b);
    }
    const history: HistoryPoint[] = [...buckets.entries()]
      .filter(([at]) => at > now - 15 * 60_000)
      .sort(([a], [b]) => a - b)
      .map(([at, b]) => ({
        at,
        calls: b['calls'] ?? 0,
        reservedIn: b['reserved_in'] ?? 0,
        reservedOut: b['reserved_out'] ?? 0,
        actualIn: b['actual_in'] ?? 0,
        actualOut: b['actual_out'] ?? 0,
      }));
    const pausedUntil = pause && Number(pause) > now ? Number(pause) : null;
    // A probe holds the others until its reading, its call's end or its time, whichever first.
    const probeId = ext['probe'];
    const probeEnd = Number(ext['probe|until'] ?? 0);
    const probeUntil =
      probeId && probeEnd > now && (await this.redis.zscore(k.slots, probeId)) !== null
        ? probeEnd
        : null;
    return {
      now,
      windowMs,
      pausedUntil,
      probeUntil,
      inFlight,
      concurrency: this.concurrency || published.concurrency || undefined,
      waiters,
      scopes,
      counters: {
        admitted: n('admitted'),
        deniedBudget: n('denied_budget'),
        deniedSlots: n('denied_slots'),
        settled: n('settled'),
        released: n('released'),
        reservedIn: n('reserved_in'),
        reservedOut: n('reserved_out'),
        actualIn: n('actual_in'),
        actualOut: n('actual_out'),
        settledReservedIn: n('settled_reserved_in'),
        settledReservedOut: n('settled_reserved_out'),
        probes: n('probes'),
      },
      history,
    };
  }

  /** Deletes every key of this limiter (tests, `llmq` obliterate). */
  async destroy(): Promise<void> {
    await this.redis.del(...this.allKeys);
  }
}
