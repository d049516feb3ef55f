import { setTimeout as sleep } from 'node:timers/promises';
import type { RedisClient } from '../redis.ts';

/** Waiters' sleeps, ended early when budget or a slot comes back anywhere (the wake channel). */
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
    // A wake-up from Redis is spread over 5 ms; one from this process's own end is at once.
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

  /** Wakes this process's waiters at once: a call here ended (their attempt sends it first). */
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
