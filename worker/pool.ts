/**
 * A worker's pool of deployments (docs/deployments.md): several keys, organizations or
 * platforms serving one queue, each a scope of the limiter with its own limits, pause and
 * circuit breaker. Jobs go to the first deployment that serves their model and has room.
 */
import { toDimensionLimits } from '../shared/config-views.ts';
import { deploymentOfScope, deploymentScopeAmong } from '../shared/deployment-scope.ts';
import {
  byPreference,
  type DeploymentConfig,
  deploymentScope,
  rankOf,
  takesBatches,
} from '../shared/deployments.ts';
import type { QueueNames } from '../shared/keys.ts';
import type { DimensionLimits, Reservation } from '../shared/limiter/types.ts';
import { matchModel } from '../shared/models.ts';
import type { RedisClient } from '../shared/redis.ts';
import { type BreakerOptions, CircuitBreaker } from './breaker.ts';
import type { ProviderCaller } from './provider.ts';

/**
 * One deployment as a worker is given it: its config, and how to call it (a caller built for
 * its platform, with its credentials; see worker/deployment-clients.ts).
 * @inline
 */
export interface PoolEntry {
  /** The deployment as configured (`deployments` in the config file, or `LLMQ_DEPLOYMENTS`). */
  readonly config: DeploymentConfig;
  /** How a call is made on it, as `WorkerOptions.provider`. */
  readonly call: ProviderCaller;
}

/** One deployment of the pool, with its scope and its breaker. */
export interface Deployment {
  readonly name: string;
  /** Its limiter scope: `deployment:<name>`. */
  readonly scope: string;
  readonly config: DeploymentConfig;
  /** Its `preference`, else its place in the list: lower goes first. */
  readonly rank: number;
  readonly call: ProviderCaller;
  readonly breaker: CircuitBreaker;
  /** Whether it takes Message Batches. */
  readonly batches: boolean;
  /** The share of the slots its calls may hold while they wait for their first answer. */
  readonly slotShare: number;
}

/** Which deployments may take a job, best first; or why none may. */
export type Choice =
  | {
      readonly ok: true;
      readonly deployments: readonly Deployment[];
      /** The deployments' names: two jobs with the same key may go to the same places. */
      readonly key: string;
    }
  | { readonly ok: false; readonly reason: string };

/** What a job asks of the pool: its model, and the deployment it pins, if any. */
export interface PoolAsk {
  readonly model: string;
  readonly deployment?: string | undefined;
}

const NAME = /^[A-Za-z0-9_-]{1,40}$/;

/**
 * A deployment's share of the slots in a pool of two or more, unless it sets its own: one that
 * accepts calls and never answers holds half of them until its breaker opens, the others the rest.
 */
export const DEFAULT_SLOT_SHARE = 0.5;

/** Throws unless the deployments can form a pool: names valid and unique, at least one. */
function checkEntries(entries: readonly PoolEntry[]): void {
  if (entries.length === 0)
    throw new TypeError('Expected `deployments` to list at least one deployment, got none');
  const seen = new Set<string>();
  for (const { config } of entries) {
    if (!NAME.test(config.name))
      throw new TypeError(
        `Expected a deployment's name to be letters, digits, "_" or "-", up to 40, got ${JSON.stringify(config.name)}`,
      );
    if (seen.has(config.name))
      throw new TypeError(
        `Expected each deployment's name once, got ${JSON.stringify(config.name)} twice: rename one`,
      );
    seen.add(config.name);
  }
}

/** Whether a deployment takes Message Batches (one rule, shared with the producers). */
export { takesBatches };

/**
 * How many of `total` slots (a worker's concurrency, the fleet's cap) a deployment's calls may
 * hold while they wait for their first answer: its share, one at least.
 */
export const slotsOf = (d: Pick<Deployment, 'slotShare'>, total: number): number =>
  d.slotShare >= 1 ? total : Math.max(1, Math.floor(d.slotShare * total));

/** The id the deployment's platform calls a model; undefined when it does not serve it. */
export function platformModelOf(config: DeploymentConfig, model: string): string | undefined {
  if (!config.models) return model;
  const pattern = matchModel(Object.keys(config.models), model);
  return pattern === undefined ? undefined : config.models[pattern];
}

/**
 * The deployments of a worker, best first: by `preference`, then by their place in the list
 * (among equal preferences, the gate puts the one with the most room first: pool-room.ts).
 */
export class DeploymentPool {
  readonly list: readonly Deployment[];
  private readonly byName: ReadonlyMap<string, Deployment>;
  private readonly choices = new Map<string, Choice>();

  constructor(
    redis: RedisClient,
    names: QueueNames,
    entries: readonly PoolEntry[],
    breaker: BreakerOptions | undefined,
  ) {
    checkEntries(entries);
    this.list = byPreference(entries).map((e) => ({
      name: e.config.name,
      scope: deploymentScope(e.config.name),
      config: e.config,
      rank: rankOf(e.config, entries.indexOf(e)),
      call: e.call,
      breaker: new CircuitBreaker(redis, names, breaker, e.config.name),
      batches: takesBatches(e.config),
      slotShare: e.config.slotShare ?? (entries.length > 1 ? DEFAULT_SLOT_SHARE : 1),
    }));
    this.byName = new Map(this.list.map((d) => [d.name, d]));
  }

  /** Each deployment's configured limits, as limiter scopes. */
  scopeLimits(): Record<string, DimensionLimits> {
    return Object.fromEntries(
      this.list.map((d) => [d.scope, d.config.limits ? toDimensionLimits(d.config.limits) : {}]),
    );
  }

  /**
   * Each deployment's bound on its calls waiting for their first answer, fleet-wide: its share of
   * the fleet's `maxInFlight` (none without one, or at a share of 1), as limiter scopes.
   */
  scopeSlots(maxInFlight: number): Record<string, number> {
    const out: Record<string, number> = {};
    for (const d of this.list) {
      const n = slotsOf(d, maxInFlight);
      if (n < maxInFlight) out[d.scope] = n;
    }
    return out;
  }

  /** The deployments that may take a job, best first (a pinned job: its own only). */
  choose(ask: PoolAsk): Choice {
    const key = `${ask.deployment ?? ''}|${ask.model}`;
    let c = this.choices.get(key);
    if (!c) {
      c = this.chooseAnew(ask);
      if (this.choices.size < 1_000) this.choices.set(key, c);
    }
    return c;
  }

  private chooseAnew(ask: PoolAsk): Choice {
    const { model, deployment: pin } = ask;
    if (pin !== undefined && !this.byName.has(pin))
      return {
        ok: false,
        reason: `the job pins deployment ${JSON.stringify(pin)}, which this worker's pool does not have (${this.names()}): enqueue it again with one of those, or without a pin`,
      };
    const pool = pin === undefined ? this.list : [this.byName.get(pin)!];
    const deployments = pool.filter((d) => platformModelOf(d.config, model) !== undefined);
    if (deployments.length === 0)
      return {
        ok: false,
        reason: `no deployment ${pin === undefined ? 'of the pool' : JSON.stringify(pin)} serves model ${JSON.stringify(model)} (${this.names()}): add it to a deployment's models`,
      };
    return { ok: true, deployments, key: deployments.map((d) => d.name).join(',') };
  }

  /** Whether `d` may take a job asking this. */
  serves(d: Deployment, ask: PoolAsk): boolean {
    const c = this.choose(ask);
    return c.ok && c.deployments.includes(d);
  }

  /** The deployment a reservation was admitted into; undefined outside the pool. */
  of(reservation: Pick<Reservation, 'scopes'>): Deployment | undefined {
    const scope = deploymentScopeAmong(reservation.scopes);
    return scope ? this.byName.get(deploymentOfScope(scope)) : undefined;
  }

  /** The deployments that take Message Batches, best first. */
  forBatches(): readonly Deployment[] {
    return this.list.filter((d) => d.batches);
  }

  /** Gives up the trial calls this process holds (it is stopping). */
  async abandonTrials(): Promise<void> {
    await Promise.all(this.list.map((d) => d.breaker.abandonTrial().catch(() => {})));
  }

  private names(): string {
    return this.list.map((d) => d.name).join(', ');
  }
}
