/**
 * Slows down guessing: after `maxFailures` failed authentications from one address, each within
 * `windowMs` of the last, that address is refused for a while that doubles with each further
 * failure. Only time clears the count: a good key in between does not (a guesser who holds one
 * key must not reset the count of its guesses at others). Counted in Redis, on Redis's clock,
 * so every `llmq serve` under one prefix counts together (and a restart forgets nothing); each
 * address's count expires once it stays quiet. When Redis does not answer in time the throttle
 * lets the request through to the key check (fail open: an outage must not lock every caller
 * out, and a wrong key is still refused).
 */
import { authFailuresKey } from './keys.ts';
import { loadLuaScripts, runLua } from './lua-scripts.ts';
import type { RedisClient } from './redis.ts';

const SCRIPTS = loadLuaScripts(new URL('./lua', import.meta.url).pathname);

/**
 * How many failed authentications an address may make, and how long it is refused after.
 * @inline
 */
export interface RedisAuthThrottleOptions {
  /** Failures (each within `windowMs` of the last) after which the address is refused. @default 5 */
  readonly maxFailures?: number;
  /** Failures are forgotten once none came for this long (and no refusal runs). @default 60_000 */
  readonly windowMs?: number;
  /** The first refusal's length; each further failure doubles it. @default 1_000 */
  readonly baseDelayMs?: number;
  /** The longest refusal. @default 60_000 */
  readonly maxDelayMs?: number;
  /** Longest wait for Redis before the throttle lets a request through. @default 1_000 */
  readonly commandTimeoutMs?: number;
  /** Told when an address starts being refused (the address and counts, never a credential). */
  readonly log?: (line: string) => void;
}

/** May the address try now: yes, or not for `retryAfterMs`. */
export type SharedThrottleVerdict =
  | { readonly ok: true }
  | { readonly ok: false; readonly retryAfterMs: number };

const DEFAULTS = {
  maxFailures: 5,
  windowMs: 60_000,
  baseDelayMs: 1_000,
  maxDelayMs: 60_000,
  commandTimeoutMs: 1_000,
};

/** The throttle of `llmq serve` (the dashboard, one process, keeps its own: ./auth-throttle.ts). */
export class RedisAuthThrottle {
  private readonly o: typeof DEFAULTS;
  private readonly log: (line: string) => void;

  /**
   * @param redis the connection (not owned)
   * @param prefix the key prefix the count lives under (every server of the prefix shares it)
   */
  constructor(
    private readonly redis: RedisClient,
    private readonly prefix: string,
    options: RedisAuthThrottleOptions = {},
  ) {
    const { log, ...rest } = options;
    this.o = { ...DEFAULTS, ...rest };
    this.log = log ?? (() => {});
    for (const [name, v] of Object.entries(this.o)) {
      if (!Number.isInteger(v) || v < 1) {
        throw new TypeError(`${name} must be a whole number from 1 up, got ${v}`);
      }
    }
  }

  /** Whether `address` may try now; while refused, how long until it may. */
  async check(address: string): Promise<SharedThrottleVerdict> {
    const reply = await this.within(
      this.redis.multi().hget(this.key(address), 'blocked_until').time().exec(),
    );
    if (!reply || reply.some(([err]) => err)) return { ok: true };
    const [[, until], [, t]] = reply as [[null, string | null], [null, [string, string]]];
    const now = Number(t[0]) * 1000 + Math.floor(Number(t[1]) / 1000);
    const left = Number(until ?? 0) - now;
    return left > 0 ? { ok: false, retryAfterMs: left } : { ok: true };
  }

  /** Records a failed authentication from `address`. */
  async failed(address: string): Promise<void> {
    const reply = await this.within(
      runLua(
        this.redis,
        SCRIPTS['authFailure']!,
        [this.key(address)],
        [this.o.maxFailures, this.o.baseDelayMs, this.o.maxDelayMs, this.o.windowMs],
      ),
    );
    const [failures, delay] = (reply ?? [0, 0]) as [number, number];
    if (delay > 0) {
      this.log(
        `${failures} failed authentications from ${address}: refusing it for ${Math.ceil(delay / 1000)} s`,
      );
    }
  }

  private key(address: string): string {
    return authFailuresKey(this.prefix, address);
  }

  /** The command's reply, or undefined when Redis failed or took longer than allowed. */
  private async within<T>(op: Promise<T>): Promise<T | undefined> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), this.o.commandTimeoutMs);
    });
    try {
      return await Promise.race([op.catch(() => undefined), late]);
    } finally {
      clearTimeout(timer);
    }
  }
}
