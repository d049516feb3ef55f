/**
 * Each deployment of a pool as `llmq status`, the limiter page and `/metrics` show it: the use
 * of its scope (`deployment:<name>`) against its limits, its pause, its breaker and the calls the
 * workers made on it. Reads only.
 */
import { type BreakerReading, readBreaker } from './breaker-state.ts';
import { deploymentOfScope, deploymentScopeAmong } from './deployment-scope.ts';
import type { QueueNames } from './keys.ts';
import { limiterKeys, pauseKeyOf } from './limiter/limiter-keys.ts';
import type { DimensionLimits, LimiterSnapshot, ScopeSnapshot } from './limiter/types.ts';
import { DEPLOYMENT_OUTCOMES, type DeploymentOutcome, deploymentField } from './metrics.ts';
import type { RedisClient } from './redis.ts';

/** One deployment's state at one instant (Redis time). */
export interface DeploymentStatus {
  readonly name: string;
  /** Its limiter scope, `deployment:<name>`: use against limits, and the provider's readings. */
  readonly scope: ScopeSnapshot;
  /** Until when a 429 pauses it (ms, Redis time); null when not paused. */
  readonly pausedUntil: number | null;
  readonly breaker: Pick<BreakerReading, 'state' | 'failures' | 'openUntil'>;
  /** The calls the workers made on it, fleet-wide: all, and by outcome (they add up). */
  readonly calls: DeploymentCalls;
}

/** A deployment's calls: `calls` in all, and by outcome. */
export type DeploymentCalls = Readonly<Record<'calls' | DeploymentOutcome, number>>;

/** A deployment's calls as the workers counted them (`MetricsWriter`), 0 where none. */
export function deploymentCallsOf(
  metrics: Readonly<Record<string, number>>,
  name: string,
): DeploymentCalls {
  const n = (f: string) => (Number.isFinite(metrics[f]) ? metrics[f]! : 0);
  const outcomes = Object.fromEntries(
    DEPLOYMENT_OUTCOMES.map((o) => [o, n(deploymentField(name, o))]),
  ) as Record<DeploymentOutcome, number>;
  return { calls: n(deploymentField(name, 'calls')), ...outcomes };
}

/** Whether a limiter scope is a deployment's. */
export const isDeploymentScope = (scope: string): boolean =>
  deploymentScopeAmong([scope]) !== undefined;

/**
 * The deployments' scopes among the scopes the workers published (`Limiter.publishConfig`), for
 * a reader's limiter: a deployment shows, with its limits, while it has no use in the window
 * (paused, or its breaker open).
 */
export function deploymentScopesOf(
  scopes: Readonly<Record<string, DimensionLimits>> | undefined,
): Record<string, DimensionLimits> {
  return Object.fromEntries(Object.entries(scopes ?? {}).filter(([s]) => isDeploymentScope(s)));
}

/** {@link deploymentScopesOf} the scopes the workers of a queue published; {} when none. */
export async function readPublishedDeploymentScopes(
  redis: RedisClient,
  names: QueueNames,
): Promise<Record<string, DimensionLimits>> {
  const raw = await redis.get(limiterKeys(names).config);
  try {
    return deploymentScopesOf(
      raw ? (JSON.parse(raw) as { scopes?: Record<string, DimensionLimits> }).scopes : undefined,
    );
  } catch {
    return {};
  }
}

/** The key of a deployment's pause, as its 429 sets it (the limiter's rule, for readers and tests). */
function deploymentPauseKey(names: QueueNames, scope: string): string {
  return pauseKeyOf(limiterKeys(names), [scope]);
}

/**
 * The deployments among a snapshot's scopes, each with its pause and breaker read, and its calls
 * from the queue's counters (`readMetrics`).
 */
export async function readDeployments(
  redis: RedisClient,
  names: QueueNames,
  snapshot: LimiterSnapshot,
  metrics: Readonly<Record<string, number>>,
): Promise<DeploymentStatus[]> {
  const scopes = snapshot.scopes.filter((s) => isDeploymentScope(s.scope));
  return Promise.all(
    scopes.map(async (scope) => {
      const name = deploymentOfScope(scope.scope);
      const [pause, b] = await Promise.all([
        redis.get(deploymentPauseKey(names, scope.scope)),
        readBreaker(redis, names, name),
      ]);
      const until = Number(pause ?? 0);
      return {
        name,
        scope,
        pausedUntil: until > snapshot.now ? until : null,
        breaker: { state: b.state, failures: b.failures, openUntil: b.openUntil },
        calls: deploymentCallsOf(metrics, name),
      };
    }),
  );
}
