import type { Redis } from 'ioredis';
import type { Cost } from '../shared/estimate.ts';
import type { JobData } from '../shared/job.ts';
import { bullPrefix, type QueueNames } from '../shared/keys.ts';
import { loadLuaScripts, runLua } from '../shared/lua-scripts.ts';

const SCRIPTS = loadLuaScripts(new URL('./lua', import.meta.url).pathname);

/** The job BullMQ would hand out next, as much of it as the gate needs. */
export interface HeadJob {
  readonly id: string;
  readonly cost: Cost;
  readonly priority: number;
  readonly scopes: readonly string[];
}

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

  /**
   * The next `n` jobs at most, in the order BullMQ hands them out (due delayed jobs where their
   * promotion will put them); fewer when the queue holds fewer, and only the first when more
   * delayed jobs are due than one peek looks at.
   */
  async peekMany(n: number): Promise<HeadJob[]> {
    // BullMQ stamps and promotes delayed jobs with the worker's clock, not Redis's.
    const dueScore = (this.clock() + 1) * DELAYED_SHIFT - 1;
    const b = this.base;
    const reply = (await runLua(
      this.redis,
      SCRIPTS['peek']!,
      [`${b}:wait`, `${b}:prioritized`, `${b}:delayed`, `${b}:meta`, `${b}:active`, `${b}:pc`],
      [`${b}:`, dueScore, DUE_SCAN, Math.max(1, Math.floor(n))],
    )) as string[] | null;
    const heads: HeadJob[] = [];
    for (let i = 0; reply && i + 1 < reply.length; i += 2) {
      try {
        const data = JSON.parse(reply[i + 1]!) as JobData;
        heads.push({
          id: reply[i]!,
          cost: data.cost,
          priority: data.priority ?? 100,
          scopes: data.scopes ?? [],
        });
      } catch {
        break;
      }
    }
    return heads;
  }

  /**
   * Moves waiting jobs to where BullMQ takes its next job from, in this order, so the next
   * moveToActive calls hand out exactly these; resolves with the ids still waiting (moved).
   */
  async moveToFront(ids: readonly string[]): Promise<string[]> {
    if (ids.length === 0) return [];
    const b = this.base;
    return (await runLua(
      this.redis,
      SCRIPTS['front']!,
      [`${b}:wait`, `${b}:prioritized`],
      [...ids],
    )) as string[];
  }
}
