import type { Redis } from 'ioredis';
import type { Cost } from '../shared/estimate.ts';
import type { JobData } from '../shared/job.ts';
import { bullPrefix, type QueueNames } from '../shared/keys.ts';

/** The job BullMQ would hand out next, as much of it as the gate needs. */
export interface HeadJob {
  readonly id: string;
  readonly cost: Cost;
  readonly priority: number;
  readonly scopes: readonly string[];
}

/** BullMQ's prioritized score: priority · 2^32 + an arrival counter. */
const PRIORITY_SHIFT = 0x100000000;
/** BullMQ's delayed score: due time (ms) · 2^12 + a counter. */
const DELAYED_SHIFT = 0x1000;
/** Due delayed jobs looked at per peek (BullMQ promotes up to 1000 at once). */
const DUE_SCAN = 100;

/**
 * Peeks at the next job without taking it. BullMQ's `moveToActive` first promotes the delayed
 * jobs that are due (into the prioritized set, behind the jobs of their priority already
 * there), then takes from the plain wait list, then from the prioritized set. llmq gives every
 * job a priority, so the wait list only holds jobs that BullMQ itself moved back (stalled).
 *
 * Delayed jobs matter: a retried job waits in the delayed set, and only a `moveToActive` call
 * promotes it; a gate that saw only wait and prioritized would never pull it when nothing else
 * is waiting. A paused or maxed queue has no head: BullMQ would hand out nothing, and a gate that
 * reserved budget for it would reserve and release in a tight loop.
 */
export class HeadPeeker {
  private readonly base: string;
  constructor(
    private readonly redis: Redis,
    names: QueueNames,
    private readonly clock: () => number = Date.now,
  ) {
    this.base = `${bullPrefix(names)}:${names.queue}`;
  }

  async peek(): Promise<HeadJob | undefined> {
    // BullMQ stamps and promotes delayed jobs with the worker's clock, not Redis's.
    const now = this.clock();
    const [[, fromWait], [, fromPrio], [, due], [, meta], [, active]] = (await this.redis
      .multi()
      .lindex(`${this.base}:wait`, -1)
      .zrange(`${this.base}:prioritized`, '0', '0', 'WITHSCORES')
      .zrangebyscore(`${this.base}:delayed`, 0, (now + 1) * DELAYED_SHIFT - 1, 'LIMIT', 0, DUE_SCAN)
      .hmget(`${this.base}:meta`, 'paused', 'concurrency')
      .llen(`${this.base}:active`)
      .exec()) as [
      [unknown, string | null],
      [unknown, string[]],
      [unknown, string[]],
      [unknown, (string | null)[]],
      [unknown, number],
    ];
    // A paused queue (Bull Board's pause button) or one at its global concurrency hands out
    // nothing: there is no head to reserve budget for.
    const [paused, cap] = meta;
    if (paused || (cap && active >= Number(cap))) return undefined;
    let id: string | undefined = fromWait ?? undefined;
    if (!id) {
      id = fromPrio[0];
      const headPriority =
        fromPrio[1] !== undefined
          ? Math.floor(Number(fromPrio[1]) / PRIORITY_SHIFT)
          : Number.POSITIVE_INFINITY;
      if (due.length > 0) {
        const pipe = this.redis.pipeline();
        for (const d of due) pipe.hget(`${this.base}:${d}`, 'priority');
        const priorities = ((await pipe.exec()) ?? []).map(([, p]) => Number(p ?? 0));
        // Promoted in due order, each behind the waiting jobs of its priority: only a more
        // urgent one goes ahead of the prioritized head.
        let best = headPriority;
        due.forEach((d, i) => {
          const p = priorities[i]!;
          if (p < best) {
            best = p;
            id = d;
          }
        });
      }
    }
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
