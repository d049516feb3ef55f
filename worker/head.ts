import type { Redis } from 'ioredis';
import type { Cost } from '../shared/estimate.ts';
import type { JobData } from '../shared/job.ts';
import { type QueueNames, bullPrefix } from '../shared/keys.ts';

/** The job BullMQ would hand out next, as much of it as the gate needs. */
export interface HeadJob {
  readonly id: string;
  readonly cost: Cost;
  readonly priority: number;
  readonly scopes: readonly string[];
}

/**
 * Peeks at the next job without taking it: BullMQ takes from the plain wait list first, then
 * from the prioritized set (llmq gives every job a priority, so the wait list only holds jobs
 * that BullMQ itself moved back).
 */
export class HeadPeeker {
  private readonly base: string;
  constructor(
    private readonly redis: Redis,
    names: QueueNames,
  ) {
    this.base = `${bullPrefix(names)}:${names.queue}`;
  }

  async peek(): Promise<HeadJob | undefined> {
    const [[, fromWait], [, fromPrio]] = (await this.redis
      .multi()
      .lindex(`${this.base}:wait`, -1)
      .zrange(`${this.base}:prioritized`, '0', '0')
      .exec()) as [[unknown, string | null], [unknown, string[]]];
    const id = fromWait ?? fromPrio[0];
    if (!id) return undefined;
    const raw = await this.redis.hget(`${this.base}:${id}`, 'data');
    if (!raw) return undefined;
    try {
      const data = JSON.parse(raw) as JobData;
      return { id, cost: data.cost, priority: data.priority ?? 100, scopes: data.scopes ?? [] };
    } catch {
      return undefined;
    }
  }
}
