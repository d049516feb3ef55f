/**
 * Fair share between tenants within a priority class: of the jobs at the head of the queue,
 * the gate serves next the first job of the tenant furthest behind in tokens served per weight
 * (worker/lua/fair-1.lua keeps that count in Redis, fleet-wide). A tenant's jobs keep their
 * order; a more urgent priority class still goes first.
 */

import { llmqKey, type QueueNames } from '../shared/keys.ts';
import { loadLuaScripts, runLua } from '../shared/lua-scripts.ts';
import type { RedisClient } from '../shared/redis.ts';
import type { HeadJob } from './bullmq-internals.ts';

const SCRIPTS = loadLuaScripts(new URL('./lua', import.meta.url).pathname);

export interface FairShareOptions {
  /** Weights by tenant name; a tenant not named weighs 1. */
  readonly weights?: Readonly<Record<string, number>>;
  /** How many jobs at the head of the queue the gate looks among for tenants. @default 2000 */
  readonly lookahead?: number;
}

/** A job without a tenant is served as the tenant "". */
const tenantOf = (h: HeadJob) => h.tenant ?? '';

export class FairShare {
  readonly lookahead: number;
  private readonly key: string;
  constructor(
    private readonly redis: RedisClient,
    names: QueueNames,
    private readonly options: FairShareOptions,
  ) {
    this.lookahead = options.lookahead ?? 2_000;
    this.key = llmqKey(names, 'fair');
  }

  private weight(tenant: string): number {
    return this.options.weights?.[tenant] ?? 1;
  }

  /**
   * The job to serve next among `heads` (in BullMQ's order): the first job, of the first
   * priority class, of the tenant whose turn it is.
   */
  async pick(heads: readonly HeadJob[]): Promise<HeadJob | undefined> {
    const first = heads[0];
    if (!first) return undefined;
    const firstOf = new Map<string, HeadJob>();
    for (const h of heads) {
      if (h.priority !== first.priority) break;
      if (!firstOf.has(tenantOf(h))) firstOf.set(tenantOf(h), h);
    }
    if (firstOf.size === 1) return first;
    const tenants = [...firstOf.keys()];
    const args = tenants.flatMap((t) => [t, this.weight(t)]);
    const i = (await runLua(this.redis, SCRIPTS['fair']!, [this.key], ['pick', ...args])) as number;
    return firstOf.get(tenants[i - 1]!) ?? first;
  }

  /** Counts the tokens a tenant's admitted job reserved. */
  async charge(h: HeadJob): Promise<void> {
    const t = tenantOf(h);
    const tokens = h.cost.inputTokens + h.cost.outputTokens;
    await runLua(this.redis, SCRIPTS['fair']!, [this.key], ['charge', t, this.weight(t), tokens]);
  }
}
