import { Lock, monotonic, sleepSeconds, type TokenLimiter } from './primitives.ts';

/**
 * The article's client SlidingWindow, line for line: a log of (time, tokens) over the last
 * `window` seconds; a waiter (one at a time, behind a FIFO lock) sleeps until the oldest entry
 * leaves, plus 10 ms.
 *
 * `new SlidingWindow(4000, 10)` is "identical to the server's"; the seed's fix for heavier load
 * is `new SlidingWindow(0.95 × limit, window + 0.25)`.
 */
export class SlidingWindow implements TokenLimiter {
  private readonly spent: [number, number][] = [];
  private readonly lock = new Lock();

  constructor(
    private readonly limit: number,
    private readonly window: number,
  ) {}

  acquire(n: number): Promise<void> {
    return this.lock.run(async () => {
      for (;;) {
        const now = monotonic();
        while (this.spent.length > 0 && now - this.spent[0]![0] >= this.window) this.spent.shift();
        if (this.spent.reduce((sum, [, t]) => sum + t, 0) + n <= this.limit) {
          this.spent.push([now, n]);
          return;
        }
        await sleepSeconds(this.spent[0]![0] + this.window - now + 0.01);
      }
    });
  }
}
