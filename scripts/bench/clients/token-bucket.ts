import { Lock, monotonic, sleepSeconds, type TokenLimiter } from './primitives.ts';

/**
 * The article's TokenBucket, line for line: starts full at `capacity`, refills at `perSecond`,
 * and one waiter at a time (behind a FIFO lock) sleeps until its tokens are there.
 *
 * The article's two buckets: full start `new TokenBucket(4000, 400)` (spends 4,000 + 400/s × 10 s
 * = 8,000 in the first window against a 4,000 limit), and sized
 * `new TokenBucket(0.2 × 4000, 0.8 × 4000 / 10)` (800 + 320/s, so C + r·W = the limit).
 */
export class TokenBucket implements TokenLimiter {
  private tokens: number;
  private updated = monotonic();
  private readonly lock = new Lock();

  constructor(
    private readonly capacity: number,
    private readonly rate: number,
  ) {
    this.tokens = capacity;
  }

  acquire(n: number): Promise<void> {
    return this.lock.run(async () => {
      for (;;) {
        const now = monotonic();
        this.tokens = Math.min(this.capacity, this.tokens + (now - this.updated) * this.rate);
        this.updated = now;
        if (this.tokens >= n) {
          this.tokens -= n;
          return;
        }
        await sleepSeconds((n - this.tokens) / this.rate);
      }
    });
  }
}
