import { randomUUID } from 'node:crypto';
import { BudgetExhaustedError } from '../budgets.ts';
import type { AcquireManyOptions } from './options.ts';
import type { Charge, Decision, Reservation } from './types.ts';

/** A denial, as a value: how long to wait and why. */
export type Denial = Decision & { ok: false };

/** What one place in line asks for; the caller may change it between attempts. */
export interface LineRequest {
  readonly cost: Charge;
  /** Nested scopes besides the global one. */
  readonly scopes: readonly string[];
  /** 1 is the most urgent. */
  readonly priority: number;
  /** The calls queued behind (see `AcquireManyOptions.more`). */
  readonly more: readonly Charge[];
}

/** One attempt's outcome: admitted (this call, then the first k of `more`), or a denial. */
export type LineAttempt =
  | { readonly ok: true; readonly reservations: Reservation[] }
  | {
      readonly ok: false;
      readonly denial: Denial;
      /** performance.now() at the denial: time spent since comes off the sleep. */
      readonly deniedAt: number;
    };

/** The limiter's parts a line uses (its private attempt, wake-ups and cancel). */
export interface LineDriver {
  attempt(
    ticket: string,
    request: LineRequest,
    tickets: readonly { ticket: string; cost: Charge }[],
  ): Promise<{ ok: true; reservation: Reservation; more?: Reservation[] } | Denial>;
  sleepOrWake(ms: number, wakeable: boolean, signal: AbortSignal | undefined): Promise<void>;
  cancel(ticket: string): Promise<void>;
  readonly maxPollMs: number;
}

/**
 * A place in the fair line, driven by its caller:
 * `for (;;) { const a = await line.attempt(); if (a.ok) …; await line.sleep(a, signal); }`.
 * The caller may change what it asks for between attempts ({@link update}) and must
 * {@link leave} when it stops waiting without being admitted.
 */
export class Line {
  private readonly ticket = randomUUID();
  private request: LineRequest;

  constructor(
    private readonly driver: LineDriver,
    request: LineRequest,
  ) {
    this.request = request;
  }

  /** What the next attempt asks for. */
  get current(): LineRequest {
    return this.request;
  }

  /** Changes what the next attempt asks for (a new head job, other jobs behind it). */
  update(change: Partial<LineRequest>): void {
    this.request = { ...this.request, ...change };
  }

  /** One attempt that keeps the place in line when denied. */
  async attempt(): Promise<LineAttempt> {
    const tickets = this.request.more.map((c) => ({ ticket: randomUUID(), cost: c }));
    const d = await this.driver.attempt(this.ticket, this.request, tickets);
    if (d.ok) return { ok: true, reservations: [d.reservation, ...(d.more ?? [])] };
    return { ok: false, denial: d, deniedAt: performance.now() };
  }

  /**
   * Sleeps until the next attempt is worth making: the denial's wait (less the time since it),
   * at most the limiter's poll, or less when budget or a slot comes back anywhere.
   */
  async sleep(a: LineAttempt & { ok: false }, signal?: AbortSignal): Promise<void> {
    const d = a.denial;
    // Waiters behind the first in line wake just after it should have been admitted; a
    // little jitter keeps several processes from arriving at the same instant.
    const jitter = d.reason === 'queued' ? 2 + Math.random() * 8 : 0;
    const spent = performance.now() - a.deniedAt;
    const wait = Math.min(Math.max(d.waitMs - spent, 1) + jitter, this.driver.maxPollMs);
    // A pause ends at a known time; budget and slots may come back sooner, at a settle.
    await this.driver.sleepOrWake(wait, d.reason !== 'paused', signal);
  }

  /** Gives up the place in line (nothing is reserved). */
  leave(): Promise<void> {
    return this.driver.cancel(this.ticket);
  }
}

/**
 * Drives a line until admitted, for {@link Limiter.acquireMany}: tells `onDenied`, sleeps; leaves
 * the line when it stops waiting (an abort throws the signal's reason).
 */
export async function waitInLine(line: Line, options: AcquireManyOptions): Promise<Reservation[]> {
  try {
    for (;;) {
      options.signal?.throwIfAborted();
      const a = await line.attempt();
      if (a.ok) return a.reservations;
      options.onDenied?.(a.denial);
      // A money budget is spent: waiting in line until its period ends is not this loop's call.
      if (a.denial.money) throw BudgetExhaustedError.of(a.denial.money);
      await line.sleep(a, options.signal);
    }
  } catch (err) {
    await line.leave().catch(() => {});
    // Aborted while asleep, the timer throws its own AbortError: throw the signal's reason,
    // as when aborted between two attempts.
    throw options.signal?.aborted ? options.signal.reason : err;
  }
}
