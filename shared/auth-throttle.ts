/**
 * Slows down guessing: after a few failed authentications from one address within a window,
 * that address is refused for a short time that doubles with each further failure. Only time
 * clears the count, never a success in between. Kept in this process's memory (each server process counts on its own, and a
 * restart forgets), bounded to `maxAddresses`, the least recently seen dropped first.
 */

/**
 * How many failed logins an address may make, and how long it is refused after.
 * @inline
 */
export interface AuthThrottleOptions {
  /** Failures allowed within `windowMs` before the address is refused. @default 5 */
  readonly freeFailures?: number;
  /** Failures are forgotten once none came for this long (and no refusal is running). @default 60_000 */
  readonly windowMs?: number;
  /** The first refusal's length; each further failure doubles it. @default 1_000 */
  readonly baseDelayMs?: number;
  /** The longest refusal. @default 60_000 */
  readonly maxDelayMs?: number;
  /** Addresses remembered at most. @default 10_000 */
  readonly maxAddresses?: number;
  /** Told when an address starts being refused (the address and counts, never a credential). */
  readonly log?: (line: string) => void;
  /** The clock, ms. @default Date.now */
  readonly now?: () => number;
}

interface Entry {
  failures: number;
  lastAt: number;
  blockedUntil: number;
}

export type ThrottleVerdict =
  | { readonly ok: true }
  | { readonly ok: false; readonly retryAfterMs: number };

export class AuthThrottle {
  private readonly free: number;
  private readonly windowMs: number;
  private readonly baseMs: number;
  private readonly maxMs: number;
  private readonly maxAddresses: number;
  private readonly log: (line: string) => void;
  private readonly now: () => number;
  private readonly entries = new Map<string, Entry>();

  constructor(options: AuthThrottleOptions = {}) {
    this.free = options.freeFailures ?? 5;
    this.windowMs = options.windowMs ?? 60_000;
    this.baseMs = options.baseDelayMs ?? 1_000;
    this.maxMs = options.maxDelayMs ?? 60_000;
    this.maxAddresses = options.maxAddresses ?? 10_000;
    this.log = options.log ?? (() => {});
    this.now = options.now ?? Date.now;
    for (const [name, v] of Object.entries({
      freeFailures: this.free,
      windowMs: this.windowMs,
      baseDelayMs: this.baseMs,
      maxDelayMs: this.maxMs,
      maxAddresses: this.maxAddresses,
    })) {
      if (!Number.isInteger(v) || v < (name === 'freeFailures' ? 0 : 1)) {
        throw new TypeError(
          `${name} must be a whole number from ${name === 'freeFailures' ? 0 : 1} up, got ${v}`,
        );
      }
    }
  }

  /** Whether `address` may try now; while refused, how long until it may. */
  check(address: string): ThrottleVerdict {
    const e = this.entries.get(address);
    const left = e ? e.blockedUntil - this.now() : 0;
    return left > 0 ? { ok: false, retryAfterMs: left } : { ok: true };
  }

  /** Records a failed authentication from `address`. */
  failed(address: string): void {
    const now = this.now();
    let e = this.entries.get(address);
    if (!e || (now - e.lastAt > this.windowMs && now >= e.blockedUntil)) {
      e = { failures: 0, lastAt: now, blockedUntil: 0 };
    }
    e.failures++;
    e.lastAt = now;
    // Re-inserted, so the Map's order is least recently seen first.
    this.entries.delete(address);
    this.entries.set(address, e);
    if (this.entries.size > this.maxAddresses)
      this.entries.delete(this.entries.keys().next().value!);
    const over = e.failures - this.free;
    if (over <= 0) return;
    const delay = Math.min(this.maxMs, this.baseMs * 2 ** Math.min(over - 1, 30));
    e.blockedUntil = now + delay;
    this.log(
      `${e.failures} failed authentications from ${address}: refusing it for ${Math.ceil(delay / 1000)} s`,
    );
  }

  /** Addresses remembered now. */
  get size(): number {
    return this.entries.size;
  }
}
