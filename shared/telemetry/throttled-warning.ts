/**
 * Where a throttled warning goes: the worker's logger interface fits.
 * @inline
 */
export interface WarningSink {
  /** One warning line, with its fields. */
  warn(message: string, fields?: Record<string, unknown>): void;
}

/**
 * One warning for a condition that every request meets while it lasts (Redis out of memory):
 * logged the first time, then at most once per `everyMs` with how often it happened meanwhile,
 * so a flood of refused requests is one line a minute, not one line each.
 */
export class ThrottledWarning {
  private lastAt = Number.NEGATIVE_INFINITY;
  private since = 0;

  constructor(
    private readonly sink: WarningSink | undefined,
    private readonly message: string,
    private readonly everyMs = 60_000,
    private readonly now: () => number = Date.now,
  ) {}

  /** Counts one occurrence; logs when the last line is older than `everyMs`. */
  hit(fields: Record<string, unknown> = {}): void {
    this.since++;
    const t = this.now();
    if (t - this.lastAt < this.everyMs) return;
    const repeated = Number.isFinite(this.lastAt) ? { timesSinceLastLine: this.since } : {};
    this.sink?.warn(this.message, { ...fields, ...repeated });
    this.lastAt = t;
    this.since = 0;
  }
}

/**
 * A listener for a client's `error` events that logs one line per distinct error (its message
 * and code, never its stack) at most once per `everyMs`: a lost Redis is a few lines, not one
 * per reconnect attempt.
 */
export function errorEventLog(
  sink: WarningSink,
  message: string,
  everyMs = 60_000,
): (err: Error & { code?: string }) => void {
  const seen = new Map<string, ThrottledWarning>();
  return (err) => {
    const key = `${err.code ?? ''} ${err.message}`;
    let w = seen.get(key);
    if (!w) {
      // Bounded: a client that fails in ever new ways still keeps a few hundred entries.
      if (seen.size >= 200) seen.clear();
      w = new ThrottledWarning(sink, message, everyMs);
      seen.set(key, w);
    }
    w.hit({ error: err.message, ...(err.code ? { code: err.code } : {}) });
  };
}
