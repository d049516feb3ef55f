import { randomUUID } from 'node:crypto';
import { BudgetExhaustedError } from '../budgets.ts';
import type { AcquireOptions } from './options.ts';
import type { Along, Charge, Decision, Reservation } from './types.ts';

/** A denial, as a value: how long to wait and why. */
export type Denial = Decision & { ok: false };

/** What one place in line asks for (as {@link AcquireOptions}); it may change between attempts. */
export type LineRequest = { readonly cost: Charge } & Required<
  Pick<AcquireOptions, 'scopes' | 'priority'>
> & {
    /**
     * The costs of the calls queued behind (its scopes unless one names its own): admitted in the
     * same round trip, in order, while each fits at once and nobody else waits in line.
     */
    readonly more: readonly Charge[];
  };

/** Admitted (this call, then the first k of `more`), or a denial. */
export type LineAttempt =
  | { readonly ok: true; readonly reservations: Reservation[] }
  /** `deniedAt`: performance.now() at the denial (time since comes off the sleep). */
  | { readonly ok: false; readonly denial: Denial; readonly deniedAt: number };

/** The limiter's parts a line uses (its private attempt, wake-ups and cancel). */
export interface LineDriver {
  attempt(
    ticket: string,
    request: LineRequest,
    tickets: readonly { ticket: string; cost: Charge }[],
    along?: Along,
  ): Promise<{ ok: true; reservation: Reservation; more?: Reservation[] } | Denial>;
  sleepOrWake(ms: number, wakeable: boolean, signal: AbortSignal | undefined): Promise<void>;
  cancel(ticket: string): Promise<void>;
  readonly maxPollMs: number;
}

/**
 * A place in the fair line, driven by its caller: attempt, sleep on a denial, {@link update}
 * what it asks for between attempts, {@link leave} when it stops waiting unadmitted.
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

  /** Changes what the next attempt asks for (a new head job, other jobs behind). */
  update(change: Partial<LineRequest>): void {
    this.request = { ...this.request, ...change };
  }

  /** One attempt that keeps the place in line when denied; `along` goes in its round trip. */
  async attempt(along?: Along): Promise<LineAttempt> {
    const tickets = this.request.more.map((c) => ({ ticket: randomUUID(), cost: c }));
    const d = await this.driver.attempt(this.ticket, this.request, tickets, along);
    if (d.ok) return { ok: true, reservations: [d.reservation, ...(d.more ?? [])] };
    return { ok: false, denial: d, deniedAt: performance.now() };
  }

  /** Sleeps the denial's wait (less the time since), at most a poll, or until woken. */
  async sleep(a: LineAttempt & { ok: false }, signal?: AbortSignal): Promise<void> {
    const d = a.denial;
    // Waiters behind the first wake just after it should be admitted, jittered across processes.
    const jitter = d.reason === 'queued' || d.reason === 'taken' ? 2 + Math.random() * 8 : 0;
    const spent = performance.now() - a.deniedAt;
    const wait = Math.min(Math.max(d.waitMs - spent, 1) + jitter, this.driver.maxPollMs);
    // A pause ends at a known time; budget and slots may come back sooner, at a settle. A hold
    // on a job ends when its taker has it: every settle's wake-up would only find it taken again.
    await this.driver.sleepOrWake(wait, d.reason !== 'paused' && d.reason !== 'taken', signal);
  }

  /** Gives up the place in line (nothing is reserved). */
  leave(): Promise<void> {
    return this.driver.cancel(this.ticket);
  }
}

/** Drives a line until admitted (its call, then the first k of `more`); leaves it if it gives up. */
export async function waitInLine(line: Line, options: AcquireOptions): Promise<Reservation[]> {
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
    // Aborted while asleep, the timer throws its own AbortError: throw the signal's reason.
    throw options.signal?.aborted ? options.signal.reason : err;
  }
}
