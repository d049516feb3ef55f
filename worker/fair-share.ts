/**
 * Fair share between tenants within a priority class: of the jobs at the head of the queue and
 * the first jobs of the tenants furthest behind (fair share's index, read by the peek: see
 * docs/limiter.md), the gate serves next the first job of the tenant furthest behind in tokens
 * served per weight (worker/lua/fair-2.lua keeps that count in Redis, fleet-wide), and as many
 * after it as fit a round, in the same turn order. A tenant's jobs keep their order; a more
 * urgent priority class still goes first.
 */

import { fairJobsKey, fairServedKey, fairTenantsKey, type QueueNames } from '../shared/keys.ts';
import { loadLuaScripts, runLua } from '../shared/lua-scripts.ts';
import { type LlmqQueue, queueNamesOf } from '../shared/queues.ts';
import type { RedisClient } from '../shared/redis.ts';
import type { HeadJob } from './bullmq-internals.ts';

const SCRIPTS = loadLuaScripts(new URL('./lua', import.meta.url).pathname);

export interface FairShareOptions {
  /** Weights by tenant name; a tenant not named weighs 1. */
  readonly weights?: Readonly<Record<string, number>>;
}

/**
 * Puts jobs back in the prioritized set by other means than an add (a dead letter retried) into
 * fair share's index (lua/index-3.lua), as the producer's add does for new ones.
 */
export async function indexWaiting(
  queue: LlmqQueue,
  jobs: readonly { readonly id: string; readonly tenant?: string | undefined }[],
): Promise<void> {
  if (jobs.length === 0) return;
  const names = queueNamesOf(queue);
  await runLua(
    // openQueue's connection: the ioredis client the queue shares.
    queue.opts.connection as RedisClient,
    SCRIPTS['index']!,
    [queue.keys['prioritized']!, fairTenantsKey(names), fairServedKey(names)],
    [fairJobsKey(names), ...jobs.flatMap((j) => [j.id, j.tenant ?? ''])],
  );
}

/** A job without a tenant is served as the tenant "". */
const tenantOf = (h: HeadJob) => h.tenant ?? '';
const tokensOf = (h: HeadJob) => h.cost.inputTokens + h.cost.outputTokens;

export class FairShare {
  private readonly keys: string[];
  private readonly jobsKey: string;
  constructor(
    private readonly redis: RedisClient,
    names: QueueNames,
    private readonly options: FairShareOptions,
  ) {
    this.keys = [fairServedKey(names), fairTenantsKey(names)];
    this.jobsKey = fairJobsKey(names);
  }

  private weight(tenant: string): number {
    return this.options.weights?.[tenant] ?? 1;
  }

  /**
   * Up to `n` jobs of `heads` (in BullMQ's order, at most `n` per tenant) in the order to serve
   * them: of the first priority class, turn by turn by tenant, each tenant's jobs in their
   * order. The first is the job to serve next.
   */
  async order(heads: readonly HeadJob[], n: number): Promise<HeadJob[]> {
    const first = heads[0];
    if (!first) return [];
    const byTenant = new Map<string, HeadJob[]>();
    for (const h of heads) {
      if (h.priority !== first.priority) break;
      const list = byTenant.get(tenantOf(h)) ?? [];
      if (list.length < n) list.push(h);
      byTenant.set(tenantOf(h), list);
    }
    const lists = [...byTenant.entries()];
    if (lists.length === 1) return lists[0]![1];
    const args = lists.flatMap(([t, jobs]) => [
      t,
      this.weight(t),
      jobs.length,
      ...jobs.map(tokensOf),
    ]);
    const picks = (await runLua(this.redis, SCRIPTS['fair']!, this.keys, [
      'order',
      n,
      ...args,
    ])) as number[];
    const next = lists.map(() => 0);
    return picks.map((i) => lists[i - 1]![1][next[i - 1]!++]!);
  }

  /** Counts the tokens the tenants' admitted jobs reserved; the jobs leave the index. */
  async charge(admitted: readonly HeadJob[]): Promise<void> {
    if (admitted.length === 0) return;
    const args = admitted.flatMap((h) => {
      const t = tenantOf(h);
      return [t, this.weight(t), tokensOf(h), h.id];
    });
    await runLua(this.redis, SCRIPTS['fair']!, this.keys, ['charge', this.jobsKey, ...args]);
  }
}
