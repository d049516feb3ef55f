import type { MockStats } from '../../testing/mock-anthropic/index.ts';

/**
 * The budget's own minimum: the least wall time a token limit allows for a given piece of work,
 * and how much of the limit a run used.
 *
 * ## The minimum
 *
 * Closed form, for n identical calls that each cost c tokens at the provider, a limit of L tokens
 * per sliding window of W, a call latency ℓ and C calls at once: a window admits at most
 * p = ⌊L / c⌋ calls, so the calls go out in ⌈n / p⌉ waves, each at least W after the one before,
 * and the last wave (r = n − (⌈n / p⌉ − 1) × p calls) still takes ⌈r / C⌉ latencies:
 *
 *     minimum = (⌈n / ⌊L / c⌋⌉ − 1) × W + ⌈r / C⌉ × ℓ
 *
 * Published scenario: n = 60, c = 207, L = 4,000, W = 10 s, C = 10: 19 calls a window, 4 waves,
 * the last of 3 calls, so minimum = 3 × 10 s + ℓ. This holds when a whole wave fits in a window
 * (⌈p / C⌉ × ℓ ≤ W).
 *
 * In general ({@link idealSchedule}), the minimum is the finish of an ideal client that runs the
 * same calls in the same (first come, first served) order with no overhead at all: each call
 * starts at the earliest instant at which (a) the call before it has started, (b) fewer than C
 * calls are in flight, and (c) the provider's sliding window has room for it in every limited
 * dimension (requests, input, output, input + output) — counting each earlier call at its full
 * charge (input as the provider counts it, and max_tokens) while in flight and, when the provider
 * gives unused output back (`actual`), at input + actual output once it has ended. It knows every
 * charge exactly, so it never draws a 429. The minimum is when its last call ends. For identical
 * calls it equals the closed form above. {@link fluidMinimumMs} is a lower bound below it.
 *
 * ## Output charged as produced (`produced`)
 *
 * The API today charges output as it is produced: nothing of max_tokens at admission (yet a call
 * needs room for one output token: a spent output budget refuses), the output as it streams. The
 * ideal client's model of it: at its start a call takes requests and input (and must fit one
 * output token more, given back); at its end it spends its actual output, which the provider
 * counts whatever room is left (a window's sum, a bucket's level, may go past the limit). Once a
 * call has ended it holds what it holds under `actual`, input + actual output, except that its
 * output entered the window at its end, not its start, so it leaves the window a window after its
 * end. Charging the output at the end, not token by token, is within the answer's streaming time
 * of the truth (the bench's answers: tens of ms, against a 10 s window; a whole, unstreamed answer
 * is charged at its end exactly). A call in flight holds no output, so the next may start sooner
 * than under `actual`; what its output takes once produced delays the calls after it.
 *
 * ## Utilization
 *
 * Tokens admitted per window over the limit: the run is cut into consecutive windows [t0 + kW,
 * t0 + (k+1)W) from its first admission; the windows that end before its last admission (the
 * client still had work to send) are averaged. The drain at the end, where no client has enough
 * work left to fill a window, is left out. Against a sliding-window provider no window can exceed
 * 100%.
 */

/** How the provider charges output: the mock's `outputAccounting` (see the module comment). */
export type Accounting = MockStats['outputAccounting'];

export interface CallShape {
  /** Input tokens the provider charges. */
  readonly input: number;
  readonly maxTokens: number;
  /** Output tokens produced (what stays charged under `actual` accounting). */
  readonly output: number;
  /** How long the provider takes to answer it, ms. */
  readonly latencyMs: number;
  /** The earliest it may start, ms from the first start (a cache read waits for its write). */
  readonly notBefore?: number | undefined;
}

/** Limits per window of each dimension the provider limits; an absent one is unlimited. */
export interface BudgetLimits {
  readonly requests?: number | undefined;
  readonly input?: number | undefined;
  readonly output?: number | undefined;
  /** Input plus output. */
  readonly tokens?: number | undefined;
}

export interface BudgetShape {
  readonly limits: BudgetLimits;
  readonly windowMs: number;
  /** Calls in flight at once. */
  readonly concurrency: number;
  readonly accounting: Accounting;
  /**
   * The provider's shape: `sliding`, an exact sliding window; `bucket`, a token bucket of the
   * limit refilled continuously at limit per window (what the API documents). @default 'sliding'
   */
  readonly shape?: 'sliding' | 'bucket' | undefined;
}

export interface IdealSchedule {
  /** Start of each call, ms from the first. */
  readonly starts: readonly number[];
  /** When the last call ends, ms from the first start: the ideal client's wall time. */
  readonly minimumMs: number;
  /** Utilization of the ideal run (see the module comment), of the tokens limit or else input. */
  readonly utilization: number;
}

type Charge = readonly [requests: number, input: number, output: number, tokens: number];

const limitsOf = (l: BudgetLimits): readonly (number | undefined)[] => [
  l.requests,
  l.input,
  l.output,
  l.tokens,
];

/** The closed form for identical calls (see the module comment). */
export function uniformMinimumMs(
  n: number,
  cost: number,
  budget: { limit: number; windowMs: number; concurrency: number },
  latencyMs: number,
): number {
  const perWindow = Math.floor(budget.limit / cost);
  if (perWindow < 1 || n < 1) return n < 1 ? 0 : Number.POSITIVE_INFINITY;
  const waves = Math.ceil(n / perWindow);
  const last = n - (waves - 1) * perWindow;
  return (waves - 1) * budget.windowMs + Math.ceil(last / budget.concurrency) * latencyMs;
}

/**
 * The fluid minimum: the least wall time the limits allow if the work could be poured in as a
 * fluid: a window's worth at once, the rest at the limit per window, in the dimension that takes
 * longest, plus the shortest call. No client, however clever its order, beats it.
 */
export function fluidMinimumMs(calls: readonly CallShape[], budget: BudgetShape): number {
  if (calls.length === 0) return 0;
  const totals = [0, 0, 0, 0];
  for (const c of calls) {
    const charge = settledCharge(c, budget.accounting);
    for (let d = 0; d < 4; d++) totals[d]! += charge[d]!;
  }
  let windows = 0;
  limitsOf(budget.limits).forEach((limit, d) => {
    if (limit !== undefined) windows = Math.max(windows, totals[d]! / limit - 1);
  });
  return windows * budget.windowMs + Math.min(...calls.map((c) => c.latencyMs));
}

const fullCharge = (c: CallShape): Charge => [1, c.input, c.maxTokens, c.input + c.maxTokens];
const NOTHING: Charge = [0, 0, 0, 0];

/** What a call stays charged in all: input + max_tokens under `reserve`, else its actual output. */
function settledCharge(c: CallShape, accounting: Accounting): Charge {
  return accounting === 'reserve' ? fullCharge(c) : [1, c.input, c.output, c.input + c.output];
}

/** What a call is charged at its start: no output under `produced`. */
function startCharge(c: CallShape, accounting: Accounting): Charge {
  return accounting === 'produced' ? [1, c.input, 0, c.input] : fullCharge(c);
}

/** The room a call needs at its start: under `produced`, its start charge and one output token. */
function roomNeeded(c: CallShape, accounting: Accounting): Charge {
  return accounting === 'produced' ? [1, c.input, 1, c.input + 1] : fullCharge(c);
}

/** What a call is charged at its end: its output under `produced`, nothing otherwise. */
function endCharge(c: CallShape, accounting: Accounting): Charge {
  return accounting === 'produced' ? [0, 0, c.output, c.output] : NOTHING;
}

/** What a call gives back at its end: its unused output under `actual`. */
function endRefund(c: CallShape, accounting: Accounting): Charge {
  if (accounting !== 'actual') return NOTHING;
  const unused = c.maxTokens - c.output;
  return [0, 0, unused, unused];
}

const plus = (a: Charge, b: Charge): Charge => a.map((x, d) => x + b[d]!) as unknown as Charge;
const minus = (a: Charge, b: Charge): Charge => a.map((x, d) => x - b[d]!) as unknown as Charge;

/**
 * A bucket's least admission span: from a full bucket, everything charged beyond its capacity
 * must be refilled, at limit per window (per dimension, the longest).
 */
export function bucketMinimumSpanMs(calls: readonly CallShape[], budget: BudgetShape): number {
  const totals = [0, 0, 0, 0];
  for (const c of calls) {
    const charge = fullCharge(c);
    for (let d = 0; d < 4; d++) totals[d]! += charge[d]!;
  }
  let span = 0;
  limitsOf(budget.limits).forEach((limit, d) => {
    if (limit !== undefined)
      span = Math.max(span, ((totals[d]! - limit) / limit) * budget.windowMs);
  });
  return Math.max(0, span);
}

/** The ideal first-come-first-served client's schedule (see the module comment). */
export function idealSchedule(calls: readonly CallShape[], budget: BudgetShape): IdealSchedule {
  if (budget.shape === 'bucket') return idealBucketSchedule(calls, budget);
  const W = budget.windowMs;
  const limits = limitsOf(budget.limits);
  const { accounting } = budget;
  const starts: number[] = [];
  const ends: number[] = [];
  // What call j holds in the provider's window at time t: its start's charge (less the unused
  // output given back once it ended, under `actual`) while its start is in the window, and under
  // `produced` its output while its end is.
  const held = (j: number, t: number): Charge => {
    const c = calls[j]!;
    const ended = ends[j]! <= t;
    const inWindow = (at: number) => at > t - W && at <= t;
    const atStart = ended
      ? minus(startCharge(c, accounting), endRefund(c, accounting))
      : startCharge(c, accounting);
    const fromStart = inWindow(starts[j]!) ? atStart : NOTHING;
    return ended && inWindow(ends[j]!) ? plus(fromStart, endCharge(c, accounting)) : fromStart;
  };
  const fits = (i: number, at: number) => {
    let sum = roomNeeded(calls[i]!, accounting);
    for (let j = 0; j < i; j++) sum = plus(sum, held(j, at));
    return limits.every((limit, d) => limit === undefined || sum[d]! <= limit);
  };
  for (let i = 0; i < calls.length; i++) {
    const call = roomNeeded(calls[i]!, accounting);
    limits.forEach((limit, d) => {
      if (limit !== undefined && call[d]! > limit)
        throw new RangeError(
          `call ${i} costs ${call[d]} (${DIMENSION_NAMES[d]}), above the limit ${limit}`,
        );
    });
    let t = Math.max(i === 0 ? 0 : starts[i - 1]!, calls[i]!.notBefore ?? 0);
    // (b) a free slot: once fewer than C earlier calls are still running.
    const running = ends.filter((e) => e > t).sort((a, b) => a - b);
    if (running.length >= budget.concurrency)
      t = Math.max(t, running[running.length - budget.concurrency]!);
    // (c) room in the window. What is held falls only when a charge leaves the window or unused
    // output is given back (it rises when output is produced, which never makes room), so those
    // are the instants to try.
    const candidates = [t];
    for (let j = 0; j < i; j++) {
      if (starts[j]! + W > t) candidates.push(starts[j]! + W);
      if (accounting === 'actual' && ends[j]! > t) candidates.push(ends[j]!);
      if (accounting === 'produced' && ends[j]! + W > t) candidates.push(ends[j]! + W);
    }
    candidates.sort((a, b) => a - b);
    const start = candidates.find((at) => fits(i, at)) ?? Number.NaN;
    starts.push(start);
    ends.push(start + calls[i]!.latencyMs);
  }
  const minimumMs = ends.length > 0 ? Math.max(...ends) : 0;
  const byTokens = budget.limits.tokens !== undefined;
  const limit = budget.limits.tokens ?? budget.limits.input ?? Number.NaN;
  const admissions = calls.map((c, i) => {
    const charge = settledCharge(c, budget.accounting);
    return { at: starts[i]!, charge: byTokens ? charge[3] : charge[1] };
  });
  return { starts, minimumMs, utilization: utilization(admissions, limit, W).mean };
}

const DIMENSION_NAMES = ['requests', 'input', 'output', 'tokens'] as const;

export interface UtilizationReport {
  /** Share of the limit admitted in each full window. */
  readonly windows: readonly number[];
  /** Their mean; NaN when nothing was admitted. */
  readonly mean: number;
}

/** Tokens admitted per window over the limit (see the module comment). */
export function utilization(
  admissions: readonly { at: number; charge: number }[],
  limit: number,
  windowMs: number,
): UtilizationReport {
  if (admissions.length === 0) return { windows: [], mean: Number.NaN };
  const sorted = [...admissions].sort((a, b) => a.at - b.at);
  const t0 = sorted[0]!.at;
  const last = sorted[sorted.length - 1]!.at;
  const full = Math.max(1, Math.floor((last - t0) / windowMs));
  const sums = new Array<number>(full).fill(0);
  for (const a of sorted) {
    const k = Math.floor((a.at - t0) / windowMs);
    if (k < full) sums[k]! += a.charge;
  }
  const windows = sums.map((s) => s / limit);
  return { windows, mean: windows.reduce((a, b) => a + b, 0) / windows.length };
}

/**
 * The window sum (tokens admitted in the window ending at t) averaged over t from `from` plus a
 * window to `to`, in steps of `stepMs`: a limiter's use of a limit, without the window edges
 * that cut bursts a window apart into one more or one fewer. NaN when the span is under a window.
 */
export function meanWindowSum(
  admissions: readonly { at: number; charge: number }[],
  span: { from: number; to: number },
  windowMs: number,
  stepMs = 50,
): number {
  const sums: number[] = [];
  for (let t = span.from + windowMs; t <= span.to; t += stepMs) {
    const inWindow = admissions.filter((a) => a.at > t - windowMs && a.at <= t);
    sums.push(inWindow.reduce((s, a) => s + a.charge, 0));
  }
  return sums.length > 0 ? sums.reduce((a, b) => a + b, 0) / sums.length : Number.NaN;
}

/**
 * The ideal client against a bucket: each call starts at the earliest instant at which the call
 * before it has started, fewer than C calls run, and every limited dimension's bucket holds the
 * room it needs. A bucket starts full, refills at limit / window up to the limit; when a call
 * ends it gets the call's unused output back (`actual`), or gives up the output produced
 * (`produced`: the level may go below empty).
 */
function idealBucketSchedule(calls: readonly CallShape[], budget: BudgetShape): IdealSchedule {
  const { accounting } = budget;
  const limits = limitsOf(budget.limits);
  const level = limits.map((l) => l ?? Number.POSITIVE_INFINITY);
  let at = 0;
  // What each call's end adds to the levels (a refund) or takes from them (output produced).
  const settles: { at: number; delta: Charge }[] = [];
  const advance = (to: number) => {
    for (;;) {
      const next = settles.length > 0 && settles[0]!.at <= to ? settles.shift()! : undefined;
      const until = next ? next.at : to;
      limits.forEach((l, d) => {
        if (l !== undefined)
          level[d] = Math.min(l, level[d]! + ((until - at) * l) / budget.windowMs);
      });
      at = until;
      if (!next) return;
      limits.forEach((l, d) => {
        if (l !== undefined) level[d] = Math.min(l, level[d]! + next.delta[d]!);
      });
    }
  };
  const starts: number[] = [];
  const ends: number[] = [];
  for (let i = 0; i < calls.length; i++) {
    const c = calls[i]!;
    const needed = roomNeeded(c, accounting);
    let t = Math.max(i === 0 ? 0 : starts[i - 1]!, calls[i]!.notBefore ?? 0);
    const running = ends.filter((e) => e > t).sort((a, b) => a - b);
    if (running.length >= budget.concurrency)
      t = Math.max(t, running[running.length - budget.concurrency]!);
    for (;;) {
      advance(t);
      // When each dimension will hold the room by refill alone; a call's end before it moves it.
      let fit = t;
      limits.forEach((l, d) => {
        if (l !== undefined && level[d]! < needed[d]!)
          fit = Math.max(fit, t + ((needed[d]! - level[d]!) * budget.windowMs) / l);
      });
      const settle = settles[0]?.at;
      if (fit === t || settle === undefined || settle > fit) {
        advance(fit);
        t = fit;
        break;
      }
      t = settle;
    }
    const charge = startCharge(c, accounting);
    limits.forEach((l, d) => {
      if (l !== undefined) level[d]! -= charge[d]!;
    });
    starts.push(t);
    ends.push(t + c.latencyMs);
    if (accounting !== 'reserve') {
      const delta = minus(endRefund(c, accounting), endCharge(c, accounting));
      settles.push({ at: t + c.latencyMs, delta });
      settles.sort((a, b) => a.at - b.at);
    }
  }
  const minimumMs = ends.length > 0 ? Math.max(...ends) : 0;
  const byTokens = budget.limits.tokens !== undefined;
  const limit = budget.limits.tokens ?? budget.limits.input ?? Number.NaN;
  const admissions = calls.map((c, i) => {
    const charge = settledCharge(c, budget.accounting);
    return { at: starts[i]!, charge: byTokens ? charge[3] : charge[1] };
  });
  return { starts, minimumMs, utilization: utilization(admissions, limit, budget.windowMs).mean };
}
