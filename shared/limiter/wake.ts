import { setTimeout as sleep } from 'node:timers/promises';
import type { RedisClient } from '../redis.ts';

/**
 * Sleeps of waiters in line that end early when a settle, release or probe reading anywhere
 * publishes on the limiter's wake channel (heard on a subscriber connection, when given).
 */
export class WakeUps {
  private readonly sleepers = new Set<(at: 'now' | 'soon') => void>();
  private readonly onMessage = (channel: string) => {
    if (channel !== this.channel) return;
    for (const wake of this.sleepers) wake('soon');
  };
  private subscribed: Promise<unknown> | undefined;

  constructor(
    private readonly subscriber: RedisClient | undefined,
    private readonly channel: string,
  ) {}

  /** Sleeps `ms`, or less when woken (with a subscriber, and when `wakeable`). */
  async sleep(ms: number, wakeable: boolean, signal: AbortSignal | undefined): Promise<void> {
    if (!this.subscriber || !wakeable) {
      await sleep(ms, undefined, signal ? { signal } : undefined);
      return;
    }
    if (!this.subscribed) {
      this.subscriber.on('smessage', this.onMessage);
      this.subscribed = this.subscriber.ssubscribe(this.channel).catch(() => {
        this.subscribed = undefined;
      });
    }
    const timer = new AbortController();
    const onAbort = () => timer.abort();
    signal?.addEventListener('abort', onAbort, { once: true });
    // Several waiters of one process must not all hit Redis at the same instant when a wake-up
    // arrives; a call of this process that ends wakes them at once (see wakeHere).
    const wake = (at: 'now' | 'soon') =>
      at === 'now' ? timer.abort() : setTimeout(() => timer.abort(), Math.random() * 5);
    this.sleepers.add(wake);
    try {
      await sleep(ms, undefined, { signal: timer.signal }).catch(() => {});
      signal?.throwIfAborted();
    } finally {
      this.sleepers.delete(wake);
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /** Whether a waiter of this process sleeps and may be woken. */
  get sleeping(): boolean {
    return this.subscriber !== undefined && this.sleepers.size > 0;
  }

  /**
   * Wakes this process's waiters at once, without the round trip of a wake-up through Redis: a
   * call here ended, and their next attempt sends its end first (same connection).
   */
  wakeHere(): void {
    for (const wake of this.sleepers) wake('now');
  }

  /** Stops listening (the subscriber connection stays its owner's to close). */
  async close(): Promise<void> {
    if (!this.subscriber || !this.subscribed) return;
    this.subscriber.off('smessage', this.onMessage);
    await this.subscriber.sunsubscribe(this.channel).catch(() => {});
    this.subscribed = undefined;
  }
}
