import { ReplyError } from 'ioredis';
import { Packr } from 'msgpackr';
import { DIMENSIONS, type Dimension, dimensionOfLua } from '../dimensions.ts';
import { LimiterUnavailableError } from '../errors.ts';
import { type LuaArg, type LuaScript, loadLuaScripts, runLua } from '../lua-scripts.ts';
import { isCluster, type RedisClient } from '../redis.ts';
import { slotMaster } from '../redis-slot.ts';
import type { LimiterKeys } from './limiter-keys.ts';
import type { ProviderReading } from './provider-headers.ts';
import type { Charge, MoneyClaim } from './types.ts';

const SCRIPTS = loadLuaScripts(new URL('./lua', import.meta.url).pathname);

/**
 * Plain msgpack maps, which Lua's `cmsgpack.unpack` reads. Integers past 32 bits (ms
 * timestamps) go as float64, which holds them exactly up to 2^53; `undefined` goes as nil, so
 * Lua sees the field absent (`now` absent: Redis's TIME).
 */
const packr = new Packr({ useRecords: false, encodeUndefinedAsNil: true });

/** Packs one script's structured argument (`ARGV[1]`); exported for the round-trip test. */
export function packArgs(value: unknown): Buffer {
  return packr.pack(value);
}

/** The dimensions' short Lua names in their one order, sent with every call. */
const DIMS = DIMENSIONS.map((d) => d.lua);

/** What `acquire-12.lua` answers, by its first element. */
export enum AcquireCode {
  Admitted = 0,
  /** Another waiter is first in line. */
  Queued = 1,
  Paused = 2,
  Budget = 3,
  Concurrency = 4,
  /** The cost can never fit a limit. */
  NeverFits = 5,
  /** A probe's reading is awaited. */
  ProbeOut = 6,
  /** A money budget has no room for the call's worst-case cost (it left the line). */
  BudgetExhausted = 7,
}

export type AcquireReply =
  | {
      readonly code: AcquireCode.Admitted;
      readonly now: number;
      /** How many of the extras were admitted with it (the first k). */
      readonly extras: number;
    }
  | {
      readonly code: AcquireCode.Queued | AcquireCode.Paused | AcquireCode.Concurrency;
      readonly waitMs: number;
    }
  | { readonly code: AcquireCode.ProbeOut; readonly waitMs: number }
  | {
      readonly code: AcquireCode.Budget;
      readonly waitMs: number;
      readonly scope: string;
      readonly dimension: Dimension;
      /** Extras that went ahead (backfill), as indexes into `extras`. */
      readonly backfilled: number[];
    }
  | {
      readonly code: AcquireCode.NeverFits;
      readonly scope: string;
      readonly dimension: Dimension;
      readonly cost: number;
      readonly limit: number;
    }
  | {
      readonly code: AcquireCode.BudgetExhausted;
      readonly budget: string;
      readonly period: 'day' | 'month';
      /** What the budget has spent, µ$. */
      readonly spent: number;
      readonly limit: number;
    };

/**
 * A scope as acquire sees it: limits by short dimension name, headroom taken off, 0 unlimited;
 * `full`, the limits before headroom (used while the provider's readings are exact).
 */
export interface ScriptScope {
  readonly name: string;
  readonly limits: Readonly<Record<string, number>>;
  readonly full?: Readonly<Record<string, number>>;
}

export interface AcquireArgs {
  readonly windowMs: number;
  readonly ticket: string;
  readonly priority: number;
  readonly queue: boolean;
  readonly leaseMs: number;
  readonly ticketTtlMs: number;
  readonly concurrency: number;
  readonly cost: Charge;
  readonly scopes: readonly ScriptScope[];
  /** Calls queued behind; `scopes` when not the first one's. */
  readonly extras: readonly {
    readonly ticket: string;
    readonly cost: Charge;
    readonly scopes?: readonly ScriptScope[] | undefined;
  }[];
  readonly backfill: number;
  readonly probeMs: number;
}

/** One call's end for `settle-6.lua` (see its header). */
export interface SettleCall {
  readonly id: string;
  readonly mode: 'usage' | 'keep' | 'release';
  readonly input: number;
  readonly output: number;
  readonly restamp: boolean;
  readonly reported: number;
  /** Actual cost in µ$ for the money hold (mode 'usage'; -1 unknown: the worst case stays). */
  readonly micros: number;
  /** Output parts as [ms ago, tokens], oldest first (see settle-8.lua). */
  readonly parts?: readonly (readonly [number, number])[];
}

export interface SettleResult {
  readonly known: boolean;
  readonly inputDelta: number;
  readonly outputDelta: number;
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

/** A money claim as acquire reads it (see money.lua); absent without one. */
function packMoney(m: MoneyClaim | undefined) {
  if (!m) return undefined;
  const limits = m.limits.map((l) => ({
    field: l.field,
    budget: l.budget,
    period: l.period,
    limit: l.limitMicros,
  }));
  return { micros: m.micros, limits, fields: m.fields };
}

function script(name: string): LuaScript {
  const s = SCRIPTS[name];
  if (!s) throw new Error(`no limiter script named ${name}`);
  return s;
}

/**
 * One typed method per limiter script: each packs its structured argument, runs the script
 * failing closed ({@link LimiterUnavailableError}) and reads its reply.
 */
export class LimiterScripts {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: LimiterKeys,
    private readonly commandTimeoutMs: number,
    /** Injected time in ms; undefined: every script reads Redis's TIME. */
    private readonly clock: (() => number) | undefined,
  ) {}

  private now(): number | undefined {
    return this.clock ? Math.floor(this.clock()) : undefined;
  }

  async acquire(a: AcquireArgs): Promise<AcquireReply> {
    const k = this.keys;
    const claims = [a.cost.money, ...a.extras.map((x) => x.cost.money)];
    const reply = (await this.run(
      'acquire',
      [
        k.log,
        k.res,
        k.slots,
        k.waiters,
        k.waitexp,
        k.seq,
        k.pause,
        k.tot,
        k.ext,
        k.stats,
        k.spend,
        k.held,
      ],
      {
        now: this.now(),
        windowMs: a.windowMs,
        ticket: a.ticket,
        priority: a.priority,
        queue: a.queue,
        leaseMs: a.leaseMs,
        ticketTtlMs: a.ticketTtlMs,
        concurrency: a.concurrency,
        cost: {
          req: a.cost.requests,
          inp: a.cost.inputTokens,
          out: a.cost.outputTokens,
          money: packMoney(a.cost.money),
        },
        scopes: a.scopes,
        periods: claims.find((m) => m !== undefined)?.periods,
        extras: a.extras.map((x) => ({
          id: x.ticket,
          req: x.cost.requests,
          inp: x.cost.inputTokens,
          out: x.cost.outputTokens,
          money: packMoney(x.cost.money),
          scopes: x.scopes,
        })),
        backfill: a.backfill,
        probeMs: a.probeMs,
      },
      {
        name: 'abandon',
        keys: [k.log, k.res, k.slots, k.tot, k.stats, k.waiters, k.waitexp, k.spend, k.held],
        args: { ids: [a.ticket, ...a.extras.map((x) => x.ticket)] },
      },
    )) as (number | string)[];
    const code = Number(reply[0]) as AcquireCode;
    const dimension = (v: unknown) => dimensionOfLua(String(v)) ?? 'tokens';
    switch (code) {
      case AcquireCode.Admitted:
        return { code, now: Number(reply[1]), extras: Number(reply[3] ?? 0) };
      case AcquireCode.Queued:
      case AcquireCode.Paused:
      case AcquireCode.Concurrency:
      case AcquireCode.ProbeOut:
        return { code, waitMs: Number(reply[1]) };
      case AcquireCode.Budget:
        return {
          code,
          waitMs: Number(reply[1]),
          scope: String(reply[2]),
          dimension: dimension(reply[3]),
          backfilled: reply.slice(4).map((i) => Number(i) - 1),
        };
      case AcquireCode.NeverFits:
        return {
          code,
          scope: String(reply[1]),
          dimension: dimension(reply[2]),
          cost: Number(reply[3]),
          limit: Number(reply[4]),
        };
      case AcquireCode.BudgetExhausted:
        return {
          code,
          budget: String(reply[1]),
          period: reply[2] === 'day' ? 'day' : 'month',
          spent: Number(reply[3]),
          limit: Number(reply[4]),
        };
      default:
        throw new LimiterUnavailableError(
          `unexpected answer ${JSON.stringify(reply)} from the acquire script`,
        );
    }
  }

  /** Ends calls in one run; one result each, in order. */
  async settle(
    calls: readonly SettleCall[],
    bucketMs: number,
    channel: string,
  ): Promise<SettleResult[]> {
    const k = this.keys;
    const keys = [k.log, k.res, k.slots, k.tot, k.stats, k.hist, k.spend, k.held];
    const r = (await this.run('settle', keys, {
      now: this.now(),
      bucketMs,
      channel,
      calls,
    })) as number[];
    return calls.map((_, i) => ({
      known: Number(r[i * 3]) === 1,
      inputDelta: Number(r[i * 3 + 1] ?? 0),
      outputDelta: Number(r[i * 3 + 2] ?? 0),
    }));
  }

  /** Takes a provider's reading of one scope (a dimension without headers is left out). */
  async observe(a: {
    readonly windowMs: number;
    readonly marginMs: number;
    readonly scope: string;
    readonly reading: ProviderReading;
    readonly of: string;
    readonly channel: string;
    /** How long before now the provider took the reading (when it admitted its call), ms. */
    readonly ageMs: number;
  }): Promise<void> {
    const { reading, ...rest } = a;
    const readings: Record<
      string,
      { limit: number; remaining: number; reset: number; rounding: number }
    > = {};
    for (const d of DIMENSIONS) {
      const r = reading[d.name];
      if (r)
        readings[d.lua] = {
          limit: r.limit,
          remaining: r.remaining,
          reset: r.resetMs ?? -1,
          rounding: r.rounding,
        };
    }
    const k = this.keys;
    await this.run('observe', [k.tot, k.ext, k.stats, k.log, k.res], {
      now: this.now(),
      ...rest,
      readings,
    });
  }

  /** Stamps (or marks begun) open reservations; how many were. */
  async start(mode: 'stamp' | 'mark', ids: readonly string[]): Promise<number> {
    const k = this.keys;
    return Number(await this.run('start', [k.log, k.res], { now: this.now(), mode, ids }));
  }

  /** Changes an open reservation's tokens; false when it is unknown. */
  async adjust(id: string, input: number, output: number): Promise<boolean> {
    const k = this.keys;
    return Number(await this.run('adjust', [k.res, k.tot, k.stats], { id, input, output })) === 1;
  }

  /** Leaves the line; true when the ticket was in it. */
  async cancel(ticket: string): Promise<boolean> {
    const k = this.keys;
    return Number(await this.run('cancel', [k.waiters, k.waitexp], { ticket })) === 1;
  }

  /** The new lease expiry (ms), or 0 when the lease was already lost. */
  async renew(id: string, leaseMs: number): Promise<number> {
    const k = this.keys;
    const args = { now: this.now(), id, leaseMs };
    return Number(await this.run('renew', [k.log, k.res, k.slots], args));
  }

  /** Sets the shared pause to at least `ms` from now; resolves with its end (ms). */
  async pause(ms: number): Promise<number> {
    return Number(await this.run('pause', [this.keys.pause], { now: this.now(), ms }));
  }

  /** Drops at most 500 reservations that left the window, and lapsed leases (and their money). */
  async prune(windowMs: number): Promise<{ now: number; dropped: number }> {
    const k = this.keys;
    const [now, dropped] = (await this.run(
      'prune',
      [k.log, k.res, k.slots, k.tot, k.spend, k.held],
      {
        now: this.now(),
        windowMs,
      },
    )) as [number, number];
    return { now: Number(now), dropped: Number(dropped) };
  }

  /**
   * Runs a script, failing closed. `undo` names a script that reverses it: when the command was
   * sent but no answer came (timeout, dropped connection), the command may still run later
   * (ioredis queues it, and resends unanswered ones after reconnecting) or may have run with
   * its answer lost, so the undo is queued behind it on the same connection, to run whenever
   * Redis answers again.
   */
  private async run(
    name: string,
    keys: string[],
    args: Record<string, unknown>,
    undo?: { name: string; keys: string[]; args: Record<string, unknown> },
  ): Promise<unknown> {
    const s = script(name);
    const lost = lostConnection(this.redis, keys[0] ?? '');
    if (lost) {
      // Commands sent now would queue until Redis comes back: fail closed instead.
      throw new LimiterUnavailableError(lost);
    }
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        this.call(s, keys, args).catch((err: unknown) => {
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
      if (undo) this.call(script(undo.name), undo.keys, undo.args).catch(() => {});
      if (err instanceof LimiterUnavailableError) throw err;
      throw new LimiterUnavailableError((err as Error).message, { cause: err });
    } finally {
      clearTimeout(timer);
    }
  }

  private call(s: LuaScript, keys: string[], args: Record<string, unknown>): Promise<unknown> {
    const packed: LuaArg = packArgs({ dims: DIMS, ...args });
    return runLua(this.redis, s, keys, [packed]);
  }
}
