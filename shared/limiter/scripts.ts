import { DIMENSIONS } from '../dimensions.ts';
import { LimiterUnavailableError } from '../errors.ts';
import { runFailClosed } from '../fail-closed.ts';
import {
  type LuaArg,
  type LuaScript,
  loadLuaScripts,
  packLuaArg,
  runLua,
  runLuaReadOnly,
  runLuaWith,
} from '../lua-scripts.ts';
import type { RedisClient } from '../redis.ts';
import { type LimiterKeys, pauseKeyOf } from './limiter-keys.ts';
import type { LimiterSettings } from './options.ts';
import type { Along, Charge, MoneyClaim, OutputAccounting, ScriptScope } from './types.ts';

const SCRIPTS = loadLuaScripts(new URL('./lua', import.meta.url).pathname);

/** The dimensions' short Lua names in their one order, sent with every call. */
const DIMS = DIMENSIONS.map((d) => d.lua);
const packed = (args: Record<string, unknown>): LuaArg => packLuaArg({ dims: DIMS, ...args });

/** Acquire's argument (see acquire-13.lua's header). */
export interface AcquireArgs
  extends Pick<LimiterSettings, 'windowMs' | 'headroom' | 'leaseMs' | 'concurrency'> {
  readonly ticket: string;
  readonly priority: number;
  /** Keep a place in line when denied. */
  readonly queue: boolean;
  readonly ticketTtlMs: number;
  /** How long it may run, in µs from its start, before it admits no more of `extras`. */
  readonly budgetUs: number;
  /** Woken when it is admitted with others in line. */
  readonly channel: string;
  readonly cost: Charge;
  readonly scopes: readonly ScriptScope[];
  /** Calls queued behind; `scopes` when not the first one's. */
  readonly extras: readonly {
    readonly ticket: string;
    readonly cost: Charge;
    readonly scopes?: readonly ScriptScope[] | undefined;
  }[];
}

/**
 * How long an admission holds the job it takes (`Charge.take`): its taker moves the job to
 * active in the same transaction, or a few ms later; a taker that died frees it then.
 */
const TAKE_MS = 1_000;

/** An end's usage when none is known (see `EndRecord`). */
export const UNKNOWN_USAGE = { input: -1, output: -1, reported: -1, micros: -1 } as const;

/** One call's end for `record-10.lua` (see its header). */
export interface EndRecord {
  readonly id: string;
  readonly mode: 'usage' | 'keep' | 'release';
  /** Actual input and output tokens (mode 'usage'; -1 keeps the estimate). */
  readonly input: number;
  readonly output: number;
  /** Output the provider reported, for the counters only (-1 unknown). */
  readonly reported: number;
  /** Actual cost in µ$ for the money hold (mode 'usage'; -1: the worst case stays). */
  readonly micros: number;
}

/** A provider's reading for `record-10.lua`: one scope, the dimensions it gave figures for. */
export interface ReadingRecord {
  readonly scope: string;
  /** The call that brought it (its reservation's id). */
  readonly id: string;
  /** How long ago that call was sent, ms. */
  readonly ageMs: number;
  readonly dims: Readonly<Record<string, { limit: number; remaining: number; reset: number }>>;
  /**
   * Brought by a refusal (a 429): the provider admitted nothing, so its reset is no news of
   * the shape (a window's counts from its newest admission, not this call).
   */
  readonly refused?: boolean;
}

/** A call's response began; its request was sent `ageMs` ago. */
export interface StampRecord {
  readonly id: string;
  readonly ageMs: number;
}

/** What one `record-10.lua` run writes, in its order: stamps, ends, the pause, readings. */
export interface RecordBatch {
  readonly stamps: readonly StampRecord[];
  readonly ends: readonly EndRecord[];
  readonly pauseMs?: number | undefined;
  /** The scopes of the call that asked for the pause (a pool's pause is its deployment's). */
  readonly pauseScopes?: readonly string[] | undefined;
  readonly readings: readonly ReadingRecord[];
  /** The money periods kept (with ends of calls holding money), else undefined. */
  readonly periods?: readonly string[] | undefined;
}

export interface EndResult {
  readonly known: boolean;
  readonly inputDelta: number;
  readonly outputDelta: number;
}

/** What `view-4.lua` reads (see its header): per scope, its shape, step and dimensions. */
export interface ViewReply {
  readonly now: number;
  readonly scopes: Readonly<
    Record<string, { shape: '' | 'b' | 'w'; step: number; dims: ViewDims }>
  >;
}
type ViewDims = Readonly<
  Record<string, { used: number; limit?: number; room?: number; fit?: number; most?: number }>
>;

/** View's argument (see view-4.lua's header). */
export interface ViewArgs extends Pick<LimiterSettings, 'windowMs' | 'headroom'> {
  readonly scopes: readonly ScriptScope[];
  /** The model scope a call is charged to (its fresh bucket may cover the others). */
  readonly model?: string | undefined;
}

/** A money claim as acquire reads it (see money.lua); absent without one. */
function packMoney(m: MoneyClaim | undefined) {
  if (!m) return undefined;
  const limits = m.limits.map(({ limitMicros, ...l }) => ({ ...l, limit: limitMicros }));
  return { micros: m.micros, limits, fields: m.fields };
}

function packCost(c: Charge) {
  return {
    req: c.requests,
    inp: c.inputTokens,
    out: c.outputTokens,
    money: packMoney(c.money),
    take: c.take,
  };
}

/** Scripts that only read: run as EVALSHA_RO, which Redis refuses to let write. */
const READ_ONLY = new Set(['view']);

function script(name: string): LuaScript {
  const s = SCRIPTS[name];
  if (!s) throw new Error(`no limiter script named ${name}`);
  return s;
}

/** One typed method per limiter script, failing closed ({@link LimiterUnavailableError}). */
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

  /** Acquire's reply as Lua gives it (see acquire-13.lua's header: a code, then its values). */
  async acquire(a: AcquireArgs, along?: Along): Promise<(number | string)[]> {
    const k = this.keys;
    const names = a.scopes.map((s) => s.name);
    const pause = pauseKeyOf(k, names);
    const keys = [k.log, k.res, k.slots, k.waiters, k.waitexp, k.seq, pause, k.tot, k.view];
    const extras = a.extras.map((x) => ({ id: x.ticket, ...packCost(x.cost), scopes: x.scopes }));
    const args = { ...a, now: this.now(), cost: packCost(a.cost), extras, takeMs: TAKE_MS };
    const undo = () => this.undoAcquire(a);
    const all = [...keys, k.stats, k.spend, k.held, k.takers];
    const own = along?.([a.ticket, ...a.extras.map((x) => x.ticket)], k.res);
    const tx = own && (() => runLuaWith(this.redis, script('acquire'), all, [packed(args)], own));
    return (await this.run('acquire', all, args, undo, tx)) as (number | string)[];
  }

  /**
   * Undoes an acquire whose answer never came (it may have run, or run yet): sent behind it on
   * its connection, its admissions are released and its ticket leaves the line.
   */
  private undoAcquire(a: AcquireArgs): Promise<unknown> {
    const release = (id: string) => ({ id, mode: 'release', ...UNKNOWN_USAGE });
    const ends = [a.ticket, ...a.extras.map((x) => x.ticket)].map(release);
    const batch = { now: this.now(), windowMs: a.windowMs, channel: '', ends };
    return Promise.all([
      this.call(script('record'), this.recordKeys(), batch),
      this.call(script('cancel'), [this.keys.waiters, this.keys.waitexp], { ticket: a.ticket }),
    ]);
  }

  /** `pauseScopes`: the scopes of the call whose 429 pauses (its deployment's pause, in a pool). */
  private recordKeys(pauseScopes: readonly string[] = []): string[] {
    const k = this.keys;
    const pause = pauseKeyOf(k, pauseScopes);
    return [k.log, k.res, k.slots, k.tot, k.view, k.stats, k.spend, k.held, pause, k.takers];
  }

  /** Stamps, ends, the pause and readings, in that order, in one run (nothing: a prune). */
  async record(
    b: Partial<RecordBatch>,
    windowMs: number,
    channel: string,
    accounting: OutputAccounting,
  ) {
    const { pauseScopes, stamps = [], ends = [], readings = [], ...batch } = b;
    const r = (await this.run('record', this.recordKeys(pauseScopes), {
      now: this.now(),
      windowMs,
      channel,
      split: accounting === 'produced',
      ...{ stamps, ends, readings, ...batch },
    })) as number[];
    const n = (i: number) => Number(r[i] ?? 0);
    const end = (i: number): EndResult => ({
      known: n(i) === 1,
      inputDelta: n(i + 1),
      outputDelta: n(i + 2),
    });
    const ended = ends.map((_, i) => end(3 + i * 3));
    return { pausedUntil: n(0) || undefined, now: n(1), dropped: n(2), ends: ended };
  }

  /** Each scope's use, the provider's projected room and a call's room, read only. */
  async view(a: ViewArgs): Promise<ViewReply> {
    const { log, res, tot, view } = this.keys;
    const args = { now: this.now(), ...a };
    return JSON.parse(String(await this.run('view', [log, res, tot, view], args))) as ViewReply;
  }

  /** Changes an open reservation's tokens; false when it is unknown. */
  async adjust(id: string, input: number, output: number): Promise<boolean> {
    const { res, tot, stats } = this.keys;
    return Number(await this.run('adjust', [res, tot, stats], { id, input, output })) === 1;
  }

  /** Leaves the line; true when the ticket was in it. */
  async cancel(ticket: string): Promise<boolean> {
    const { waiters, waitexp } = this.keys;
    return Number(await this.run('cancel', [waiters, waitexp], { ticket })) === 1;
  }

  /** The new lease expiry (ms), or 0 when the lease was already lost. */
  async renew(id: string, leaseMs: number, windowMs: number): Promise<number> {
    const k = this.keys;
    const args = { now: this.now(), id, leaseMs, windowMs };
    return Number(await this.run('renew', [k.log, k.res, k.slots, k.tot], args));
  }

  /** Runs a script, failing closed ({@link runFailClosed}); `undo` reverses a lost answer. */
  private run(
    name: string,
    keys: string[],
    args: Record<string, unknown>,
    undo?: () => Promise<unknown>,
    send = () => this.call(script(name), keys, args),
  ): Promise<unknown> {
    return runFailClosed({
      redis: this.redis,
      key: keys[0] ?? '',
      timeoutMs: this.commandTimeoutMs,
      send,
      ...(undo ? { undo } : {}),
    });
  }

  private call(s: LuaScript, keys: string[], args: Record<string, unknown>): Promise<unknown> {
    if (READ_ONLY.has(s.name)) return runLuaReadOnly(this.redis, s, keys, [packed(args)]);
    return runLua(this.redis, s, keys, [packed(args)]);
  }
}
