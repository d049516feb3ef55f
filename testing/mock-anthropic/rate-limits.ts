/**
 * The mock's rate limiters: an exact sliding-window log and a continuously refilled token bucket,
 * behind one interface. They are pure state machines over a `now` passed in (ms), so window
 * arithmetic is tested with an injected clock; the server passes `Date.now()`.
 *
 * A denial is a value (`{ admitted: false, dimension, retryAfterMs }`), not an exception, and a
 * refused request is not charged. Refunds (for `outputAccounting: 'actual'`) are first-class.
 */

/** The four quantities the real API limits, named as in the MockStats JSON. */
export const DIMENSIONS = ['requests', 'input_tokens', 'output_tokens', 'tokens'] as const;
/**
 * One quantity the API limits.
 * @inline
 */
export type Dimension = (typeof DIMENSIONS)[number];

/**
 * What one request costs (or gives back) in each dimension.
 * @inline
 */
export type Charge = Record<Dimension, number>;

/**
 * When the mock charges a call's output: all of `max_tokens` at admission (`reserve`), then less
 * what went unused (`actual`), or only as it is produced (`produced`).
 * @inline
 */
export type OutputAccounting = 'reserve' | 'actual' | 'produced';

/** Limit per window for each limited dimension; an absent dimension is unlimited. */
export type Limits = Partial<Record<Dimension, number>>;

/**
 * How the mock counts its window: a sliding log, or a token bucket refilled continuously.
 * @inline
 */
export type Algorithm = 'sliding' | 'bucket';

/** Proof of an admission, handed back to `refund`. */
export interface LimitTicket {
  /** Admission time, ms. */
  readonly at: number;
  /** What is still charged for this admission (lowered by refunds). */
  readonly charge: Readonly<Charge>;
}

export type Admission =
  | { readonly admitted: true; readonly ticket: LimitTicket }
  | {
      readonly admitted: false;
      /** The limit that refused: the one that frees up last when several do. */
      readonly dimension: Dimension;
      /** How long until the request would fit if nothing else were admitted, ms. */
      readonly retryAfterMs: number;
      /** False when the cost is above the limit itself, so waiting can never help. */
      readonly canEverFit: boolean;
    };

/** What a client sees of one dimension, for the `anthropic-ratelimit-*` headers. */
export interface DimensionState {
  readonly limit: number;
  /** What is left now, rounded down to an integer. */
  readonly remaining: number;
  /** When the dimension is fully replenished (nothing in use), ms epoch. */
  readonly resetAt: number;
}

export interface RateLimiter {
  readonly algorithm: Algorithm;
  /** Admits and charges `cost` if every limited dimension has room for it at `now`. */
  consume(cost: Charge, now: number): Admission;
  /** Gives back part of an admission's charge (never more than is still charged). */
  refund(ticket: LimitTicket, amount: Partial<Charge>, now: number): void;
  /**
   * Charges `amount` at `now` whatever is left (output as it is produced: the API counts it,
   * it does not refuse it midway); a bucket may go below empty.
   */
  spend(amount: Partial<Charge>, now: number): void;
  /** The state of each limited dimension at `now`. */
  state(now: number): Partial<Record<Dimension, DimensionState>>;
}

/** Builds the limiter for `algorithm` over `limits` per `windowMs`. */
export function createRateLimiter(
  algorithm: Algorithm,
  limits: Limits,
  windowMs: number,
): RateLimiter {
  return algorithm === 'sliding'
    ? createSlidingWindowLimiter(limits, windowMs)
    : createTokenBucketLimiter(limits, windowMs);
}

/** Every dimension that has a limit, with it. */
function limitedDimensions(limits: Limits): [Dimension, number][] {
  const result: [Dimension, number][] = [];
  for (const dimension of DIMENSIONS) {
    const limit = limits[dimension];
    if (limit !== undefined) result.push([dimension, limit]);
  }
  return result;
}

export function zeroCharge(): Charge {
  return { requests: 0, input_tokens: 0, output_tokens: 0, tokens: 0 };
}

interface Refusal {
  dimension: Dimension;
  retryAfterMs: number;
  canEverFit: boolean;
}

/** Of several refusing dimensions, report a hopeless one first, else the one that waits longest. */
function worstRefusal(refusals: Refusal[]): Admission | undefined {
  let worst: Refusal | undefined;
  for (const refusal of refusals) {
    if (
      !worst ||
      (!refusal.canEverFit && worst.canEverFit) ||
      (refusal.canEverFit === worst.canEverFit && refusal.retryAfterMs > worst.retryAfterMs)
    ) {
      worst = refusal;
    }
  }
  return worst ? { admitted: false, ...worst } : undefined;
}

interface LogEntry {
  readonly at: number;
  readonly charge: Charge;
}

/**
 * Exact sliding window: a request is admitted iff, for each limited dimension, the charges
 * admitted in (now − windowMs, now] plus its cost stay within the limit. Keeps a log of the
 * admissions still inside the window and running sums over it.
 */
export function createSlidingWindowLimiter(limits: Limits, windowMs: number): RateLimiter {
  const limited = limitedDimensions(limits);
  const log: LogEntry[] = [];
  let head = 0;
  const used = zeroCharge();
  const issued = new WeakSet<LimitTicket>();

  function prune(now: number): void {
    while (head < log.length) {
      const entry = log[head]!;
      if (entry.at > now - windowMs) break;
      for (const dimension of DIMENSIONS) used[dimension] -= entry.charge[dimension];
      head++;
    }
    // Compact now and then so the log does not grow with everything ever admitted.
    if (head > 1024 && head * 2 > log.length) {
      log.splice(0, head);
      head = 0;
    }
  }

  /** When enough old charges have left the window for `need` more of `dimension` to fit. */
  function waitFor(dimension: Dimension, need: number, now: number): number {
    let freed = 0;
    for (let i = head; i < log.length; i++) {
      const entry = log[i]!;
      freed += entry.charge[dimension];
      if (freed >= need) return entry.at + windowMs - now;
    }
    return windowMs;
  }

  return {
    algorithm: 'sliding',
    consume(cost, now) {
      prune(now);
      const refusals: Refusal[] = [];
      for (const [dimension, limit] of limited) {
        const need = used[dimension] + cost[dimension] - limit;
        if (need <= 0) continue;
        refusals.push(
          cost[dimension] > limit
            ? { dimension, retryAfterMs: windowMs, canEverFit: false }
            : { dimension, retryAfterMs: waitFor(dimension, need, now), canEverFit: true },
        );
      }
      const refusal = worstRefusal(refusals);
      if (refusal) return refusal;
      const entry: LogEntry = { at: now, charge: { ...cost } };
      log.push(entry);
      for (const dimension of DIMENSIONS) used[dimension] += cost[dimension];
      issued.add(entry);
      return { admitted: true, ticket: entry };
    },
    refund(ticket, amount, now) {
      if (!issued.has(ticket)) return;
      prune(now);
      const entry = ticket as LogEntry;
      const inWindow = entry.at > now - windowMs;
      for (const dimension of DIMENSIONS) {
        const back = Math.min(Math.max(amount[dimension] ?? 0, 0), entry.charge[dimension]);
        entry.charge[dimension] -= back;
        if (inWindow) used[dimension] -= back;
      }
    },
    spend(amount, now) {
      prune(now);
      const charge = { ...zeroCharge(), ...amount };
      log.push({ at: now, charge });
      for (const dimension of DIMENSIONS) used[dimension] += charge[dimension];
    },
    state(now) {
      prune(now);
      const states: Partial<Record<Dimension, DimensionState>> = {};
      for (const [dimension, limit] of limited) {
        let resetAt = now;
        for (let i = log.length - 1; i >= head; i--) {
          const entry = log[i]!;
          if (entry.charge[dimension] > 0) {
            resetAt = entry.at + windowMs;
            break;
          }
        }
        states[dimension] = { limit, remaining: Math.max(0, limit - used[dimension]), resetAt };
      }
      return states;
    },
  };
}

/**
 * Token bucket, the algorithm the real API documents: each limited dimension holds up to `limit`,
 * refilled continuously at `limit / windowMs`; an admission takes its cost out. A full bucket lets
 * a burst of `limit` through at once, so any interval of `windowMs` can see up to twice the limit.
 */
export function createTokenBucketLimiter(limits: Limits, windowMs: number): RateLimiter {
  const limited = limitedDimensions(limits);
  const level = new Map<Dimension, number>(limited);
  let refilledAt: number | undefined;
  const issued = new WeakSet<LimitTicket>();

  function refill(now: number): void {
    const elapsed = refilledAt === undefined ? 0 : Math.max(0, now - refilledAt);
    refilledAt = refilledAt === undefined ? now : Math.max(refilledAt, now);
    if (elapsed === 0) return;
    for (const [dimension, limit] of limited) {
      const current = level.get(dimension) ?? limit;
      level.set(dimension, Math.min(limit, current + (elapsed * limit) / windowMs));
    }
  }

  return {
    algorithm: 'bucket',
    consume(cost, now) {
      refill(now);
      const refusals: Refusal[] = [];
      for (const [dimension, limit] of limited) {
        const available = level.get(dimension) ?? limit;
        const missing = cost[dimension] - available;
        if (missing <= 0) continue;
        refusals.push(
          cost[dimension] > limit
            ? { dimension, retryAfterMs: windowMs, canEverFit: false }
            : { dimension, retryAfterMs: (missing * windowMs) / limit, canEverFit: true },
        );
      }
      const refusal = worstRefusal(refusals);
      if (refusal) return refusal;
      for (const [dimension, limit] of limited) {
        level.set(dimension, (level.get(dimension) ?? limit) - cost[dimension]);
      }
      const ticket: LogEntry = { at: now, charge: { ...cost } };
      issued.add(ticket);
      return { admitted: true, ticket };
    },
    refund(ticket, amount, now) {
      if (!issued.has(ticket)) return;
      refill(now);
      const entry = ticket as LogEntry;
      for (const dimension of DIMENSIONS) {
        const back = Math.min(Math.max(amount[dimension] ?? 0, 0), entry.charge[dimension]);
        entry.charge[dimension] -= back;
        const limit = limits[dimension];
        if (limit !== undefined) {
          level.set(dimension, Math.min(limit, (level.get(dimension) ?? limit) + back));
        }
      }
    },
    spend(amount, now) {
      refill(now);
      for (const [dimension, limit] of limited) {
        level.set(dimension, (level.get(dimension) ?? limit) - (amount[dimension] ?? 0));
      }
    },
    state(now) {
      refill(now);
      const states: Partial<Record<Dimension, DimensionState>> = {};
      for (const [dimension, limit] of limited) {
        const available = level.get(dimension) ?? limit;
        states[dimension] = {
          limit,
          remaining: Math.max(0, Math.floor(available)),
          resetAt: now + ((limit - available) * windowMs) / limit,
        };
      }
      return states;
    },
  };
}
