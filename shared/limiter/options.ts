import { DIMENSIONS } from '../dimensions.ts';
import type { QueueNames } from '../keys.ts';
import { isModelScope } from '../models.ts';
import { MAX_PRIORITY } from '../priority.ts';
import type { RedisClient } from '../redis.ts';
import {
  type Charge,
  type Decision,
  type DimensionLimits,
  GLOBAL_SCOPE,
  type OutputAccounting,
  type ScriptScope,
  type Usage,
} from './types.ts';

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
  /**
   * Calls of a scope that may wait for their first answer at once, across every process, by
   * scope name (a pool's deployment: its share of `concurrency`, so that one that never answers
   * cannot hold every slot). @default {}
   */
  readonly scopeSlots?: Readonly<Record<string, number>>;
  /** Share of each limit kept free (for clients llmq cannot see: see docs/limiter.md). @default 0 */
  readonly headroom?: number;
  /** How long a slot and an open reservation live without renewal. @default 30_000 */
  readonly leaseMs?: number;
  /** How the provider charges output ({@link OutputAccounting}). @default 'reserve' */
  readonly outputAccounting?: OutputAccounting;
  /** Injected time in ms for tests; by default every script reads Redis's `TIME`. */
  readonly clock?: () => number;
  /** The longest a waiter sleeps between two attempts. @default 1_000 */
  readonly maxPollMs?: number;
  /** How long a command may take before the limiter gives up (fails closed). @default 5_000 */
  readonly commandTimeoutMs?: number;
  /**
   * The longest one acquire runs before it stops admitting the calls queued behind its first
   * (Redis's time, from the script's start): Redis runs one script at a time, every other
   * client waits meanwhile. The rest go in the next acquire. @default 1
   */
  readonly admitBudgetMs?: number;
  /**
   * A connection of its own (subscriber mode) on which waiters hear budget or a slot come back
   * in any process, instead of at their next poll. Not owned: close it after {@link Limiter.close}.
   */
  readonly subscriber?: RedisClient;
}

export interface AcquireOptions {
  /** Nested scopes besides the global one. */
  readonly scopes?: readonly string[];
  /** 1 is the most urgent. @default 100 */
  readonly priority?: number;
  readonly signal?: AbortSignal;
  /** Called after each denial, before sleeping (to decide per denial, drive a {@link Limiter.line}). */
  readonly onDenied?: (d: Decision & { ok: false }) => void;
}

/** A scope's name: no "|", "," or spaces (Lua keys totals and reservations by it). */
export function checkScopeName(name: string): void {
  if (!/^[^|,\s]{1,200}$/.test(name)) {
    throw new TypeError(
      `scope name must be 1 to 200 characters without "|", "," or spaces, got ${JSON.stringify(name)}`,
    );
  }
}

/** {@link LimiterOptions} with every default filled in and checked. */
export type LimiterSettings = Required<
  Omit<LimiterOptions, 'clock' | 'subscriber' | 'limits' | 'scopes' | 'scopeSlots'>
> &
  Pick<LimiterOptions, 'clock' | 'subscriber'> & {
    readonly limits: DimensionLimits;
    readonly scopes: Readonly<Record<string, DimensionLimits>>;
    readonly scopeSlots: Readonly<Record<string, number>>;
    /** Whether the window was given; when not, snapshots use the window workers published. */
    readonly windowGiven: boolean;
  };

/** Defaults first, then every option checked, the bad value repeated in the error. */
export function resolveLimiterOptions(options: LimiterOptions): LimiterSettings {
  const given = Object.entries(options).filter(([, v]) => v !== undefined);
  const s = {
    ...{
      windowMs: 60_000,
      leaseMs: 30_000,
      limits: {},
      scopes: {},
      concurrency: 0,
      scopeSlots: {},
    },
    ...{ headroom: 0, outputAccounting: 'reserve', maxPollMs: 1_000, commandTimeoutMs: 5_000 },
    admitBudgetMs: 1,
    ...Object.fromEntries(given),
    windowGiven: options.windowMs !== undefined,
  } as LimiterSettings;
  const bad = (what: string, v: unknown) => new TypeError(`${what}, got ${v}`);
  if (!(s.windowMs >= 1)) throw bad('windowMs must be at least 1', s.windowMs);
  if (!(s.headroom >= 0 && s.headroom < 1))
    throw bad('headroom must be from 0 to below 1', s.headroom);
  if (!(s.leaseMs >= 100)) throw bad('leaseMs must be at least 100', s.leaseMs);
  if (!(s.admitBudgetMs >= 0)) throw bad('admitBudgetMs must be 0 or more', s.admitBudgetMs);
  const c = wholeError('concurrency', s.concurrency, '');
  if (c) throw c;
  for (const name of Object.keys(s.scopes)) checkScopeName(name);
  for (const [name, n] of Object.entries(s.scopeSlots)) {
    checkScopeName(name);
    const e = wholeError(`scopeSlots[${JSON.stringify(name)}]`, n, '');
    if (e) throw e;
  }
  return s;
}

/** The error of a count that is not a whole number (of `unit`) from 0 up, if it is not. */
function wholeError(name: string, v: unknown, unit: string, hint = ''): TypeError | undefined {
  if (Number.isSafeInteger(v) && (v as number) >= 0) return undefined;
  return new TypeError(`${name} must be a whole number${unit} from 0 up, got ${v}${hint}`);
}

/** A cost's every count is a whole number from 0 up. */
export function checkCost(cost: Charge): void {
  const { requests, inputTokens, outputTokens } = cost;
  for (const [k, v] of Object.entries({ requests, inputTokens, outputTokens })) {
    const e = wholeError(`cost.${k}`, v, '');
    if (e) throw e;
  }
  const e = cost.money && wholeError('cost.money.micros', cost.money.micros, ' of µ$');
  if (e) throw e;
  for (const s of cost.scopes ?? []) checkScopeName(s);
}

/** An attempt's costs and priority, checked before anything is sent. */
export function checkAttempt(cost: Charge, more: readonly { cost: Charge }[], priority: number) {
  for (const c of [cost, ...more.map((m) => m.cost)]) checkCost(c);
  if (!Number.isInteger(priority) || priority < 1 || priority > MAX_PRIORITY) {
    throw new TypeError(
      `priority must be a whole number from 1 to ${MAX_PRIORITY}, got ${priority}`,
    );
  }
}

/** What is wrong with a settle's usage, if anything (a count Redis cannot add). */
export function usageError(usage: Usage): TypeError | undefined {
  const hint = "; pass the provider's usage, or call keep() when it is not known";
  const c = usage.costMicros;
  return (
    (c === undefined ? undefined : wholeError('settle: usage.costMicros', c, ' of µ$')) ??
    wholeError('settle: usage.inputTokens', usage.inputTokens, ' of tokens', hint) ??
    wholeError('settle: usage.outputTokens', usage.outputTokens, ' of tokens', hint)
  );
}

/** Every scope a call is charged to, the global one first, each once (not twice when named twice). */
export function scopeList(scopes: readonly string[]): string[] {
  return [...new Set([GLOBAL_SCOPE, ...scopes])];
}

/** A scope's configured limits (before headroom); none for a scope not configured. */
export function limitsOf(s: LimiterSettings, scope: string): DimensionLimits {
  return scope === GLOBAL_SCOPE ? s.limits : (s.scopes[scope] ?? {});
}

/**
 * Every scope charged, with its limits by short dimension name (0: none); a model's scope is
 * `unknown` when no limit is configured, its own or the key's (one call until an answer).
 */
export function scriptScopes(s: LimiterSettings, scopes: readonly string[]): ScriptScope[] {
  const keyless = Object.values(s.limits).every((x) => !x);
  return scopeList(scopes).map((name) => {
    checkScopeName(name);
    const l = limitsOf(s, name);
    const limits: Record<string, number> = {};
    for (const d of DIMENSIONS) limits[d.lua] = l[d.name] ?? 0;
    const none = keyless && isModelScope(name) && Object.values(limits).every((x) => x === 0);
    const slots = s.scopeSlots[name];
    return {
      name,
      limits,
      ...(none ? { unknown: true as const } : {}),
      ...(slots ? { slots } : {}),
    };
  });
}

/**
 * The scopes as the view reads them: as acquire's, but a model's first call out is a slot, not
 * a limit (acquire answers it as one), so no `unknown`.
 */
export function viewScopes(s: LimiterSettings, scopes: readonly string[]): ScriptScope[] {
  return scriptScopes(s, scopes).map(({ unknown: _, ...scope }) => scope);
}
