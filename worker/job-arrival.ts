import type { Redis } from 'ioredis';
import { bullPrefix, type QueueNames } from '../shared/keys.ts';

/**
 * Wakes an idle gate when a job arrives: BullMQ adds a marker to `<queue>:marker` when a job is
 * added to a queue its workers may be waiting on (what its own workers block on). Blocks on a
 * connection of its own; one waiting gate takes each marker, the others wake on their timeout.
 */
export class JobArrival {
  private readonly key: string;

  constructor(
    private readonly redis: Redis,
    names: QueueNames,
  ) {
    this.key = `${bullPrefix(names)}:${names.queue}:marker`;
  }

  /** Resolves when a job arrives, or after `ms` (at least 10), or at once on a Redis error. */
  async wait(ms: number): Promise<void> {
    await this.redis.bzpopmin(this.key, Math.max(ms, 10) / 1_000).catch(() => {});
  }

  close(): Promise<void> {
    return this.redis
      .quit()
      .then(() => {})
      .catch(() => this.redis.disconnect());
  }
}
