import type { MoneyClaim, MoneyShortfall } from '../budgets.ts';
import type { Dimension } from '../dimensions.ts';
import type { Cost } from '../estimate.ts';
import type { Behind } from '../lua-scripts.ts';

export type { Cost, Dimension, MoneyClaim, MoneyShortfall };

/** Limits of one scope, per window (tokens: input plus output). An absent one is unlimited. */
export type DimensionLimits = { readonly [D in Dimension]?: number | undefined };

/** What an admission charges: tokens, money, and (a call queued behind) its own scopes. */
export interface Charge extends Cost {
  readonly money?: MoneyClaim | undefined;
  readonly scopes?: readonly string[] | undefined;
  /**
   * The job the admission is for (the gate's: the job's id): while one admission holds it (a
   * second), no other is made for it, so two workers never admit the same job: one admission,
   * one taker.
   */
  readonly take?: string | undefined;
}

/**
 * How the provider charges output, which llmq must match: `reserve` max_tokens at admission,
 * kept; `actual` max_tokens, the unused part given back at the end (the API's earlier rule);
 * `produced` as it is produced (the API's current rule: a reading has not counted the output
 * still to come of calls in flight).
 */
export type OutputAccounting = 'reserve' | 'actual' | 'produced';

/** A scope as acquire sees it: limits by short dimension name (0: none); `unknown`: see options. */
export interface ScriptScope {
  readonly name: string;
  readonly limits: Readonly<Record<string, number>>;
  readonly unknown?: true;
  /** How many of its calls may wait for their first answer at once (absent: no bound). */
  readonly slots?: number;
}

/** The scope every call belongs to: the provider key. */
export const GLOBAL_SCOPE = 'global';

/** What `acquire` hands back: spend it with the provider, then settle it. */
export interface Reservation {
  readonly id: string;
  /** What it charged (with the money it holds, if any). */
  readonly cost: Charge;
  /** Every scope charged, the global one first. */
  readonly scopes: readonly string[];
  /** Redis time at admission (ms). */
  readonly admittedAt: number;
  readonly leaseExpiresAt: number;
}

/**
 * `money`: a money budget has no room for its worst case (it left the line); `taken`: another
 * admission holds the call's job (see {@link Charge.take}).
 */
export type DenialReason = 'queued' | 'paused' | 'budget' | 'concurrency' | 'money' | 'taken';

/** A denial is a value: how long to wait and why. */
export type Decision =
  | { readonly ok: true; readonly reservation: Reservation }
  | {
      readonly ok: false;
      readonly reason: DenialReason;
      readonly waitMs: number;
      readonly scope?: string;
      readonly dimension?: Dimension;
      readonly money?: MoneyShortfall;
    };

/** What the provider reported as used, for settle. */
export interface Usage {
  /** Uncached input plus cache creation (cache reads do not count against ITPM). */
  readonly inputTokens: number;
  readonly outputTokens: number;
  /** Its cost in whole µ$, which its money hold settles to (absent: the worst case stays). */
  readonly costMicros?: number | undefined;
}

export interface DimensionUse {
  /** Our spend in the window (open calls at their reservation). */
  readonly used: number;
  /** The configured limit, before headroom; undefined when none is configured. */
  readonly limit: number | undefined;
  /** The provider's limit, as its latest reading said; undefined before any. */
  readonly providerLimit: number | undefined;
  /** The provider's room now, projected from a reading fresher than a window (else undefined). */
  readonly providerRoom: number | undefined;
  /**
   * What a call may take now, by the admission's own rule (the cap less headroom, the provider's
   * projected room less headroom, a covering bucket); undefined when nothing limits it.
   */
  readonly room: number | undefined;
  /** The most a window allows: the lower of the configured and provider limits, less headroom. */
  readonly perWindow: number | undefined;
}

/** How the provider gives room back, as learned from its headers. */
export type ProviderShape = 'bucket' | 'window' | 'unknown';

export interface ScopeSnapshot {
  readonly scope: string;
  readonly shape: ProviderShape;
  /** The step the provider rounds token readings to (learned; 0 before any). */
  readonly roundingStep: number;
  readonly dimensions: Record<Dimension, DimensionUse>;
}

export interface LimiterSnapshot {
  readonly now: number;
  readonly windowMs: number;
  readonly pausedUntil: number | null;
  readonly inFlight: number;
  readonly concurrency: number | undefined;
  readonly waiters: number;
  readonly scopes: readonly ScopeSnapshot[];
  readonly counters: {
    readonly admitted: number;
    readonly deniedBudget: number;
    readonly deniedSlots: number;
    readonly settled: number;
    readonly released: number;
    readonly reservedIn: number;
    readonly reservedOut: number;
    readonly actualIn: number;
    readonly actualOut: number;
    /** Of the settled calls: what was reserved, for the estimate's accuracy. */
    readonly settledReservedIn: number;
    readonly settledReservedOut: number;
  };
}

/** Sent behind an acquire in its transaction (the gate's fetches), given the ids it may admit. */
export type Along = (ids: readonly string[], reservations: string) => Behind;
