/**
 * What a worker's probes decide. Liveness looks at this process only (a Redis outage must not
 * get every worker restarted at once): its gate loop turns. Readiness adds what it needs around
 * it: Redis answers, the fleet's stored limits are the ones this worker enforces, and it is not
 * draining.
 */
import { type FleetLimits, limitDifferences, readFleetLimits } from '../shared/fleet-limits.ts';
import type { QueueNames } from '../shared/keys.ts';
import { type ProbeVerdict, redisSilence, verdict } from '../shared/probes.ts';
import type { RedisClient } from '../shared/redis.ts';
import { formatMs } from './gate-waits.ts';
import type { WorkerHealth } from './worker-options.ts';

/** What the readiness probe reads besides the worker. */
export interface ReadinessParts {
  readonly redis: RedisClient;
  readonly names: QueueNames;
  /** The limits this worker runs with. */
  readonly limits: FleetLimits;
  /** How long Redis may take to answer PING. */
  readonly redisTimeoutMs: number;
}

/**
 * Alive unless the gate has been in one step longer than `stallMs`: no step of a sound loop
 * lasts that long (a wait for budget ends within the provider's window, a wait for a job within
 * a second, a call by its timeout, and a full worker waits for a call, which does not count).
 */
export function liveness(health: WorkerHealth, stallMs: number): ProbeVerdict {
  if (health.stepMs <= stallMs) return verdict([]);
  return verdict([
    `the gate has been in one step for ${formatMs(health.stepMs)} (the bound is ${formatMs(stallMs)}): its loop does not turn; restart the worker`,
  ]);
}

/** Why the fleet's stored limits are not this worker's: empty when they are (or none are stored). */
async function limitsApart(p: ReadinessParts): Promise<string[]> {
  const stored = await readFleetLimits(p.redis, p.names);
  const differences = stored ? limitDifferences(p.limits, stored.limits) : [];
  if (differences.length === 0) return [];
  return [
    `this worker's limits differ from the fleet's (${differences.join('; ')}): restart it to take the fleet's (or with --replace-limits to impose its own)`,
  ];
}

/** Ready when Redis answers, the fleet's limits are this worker's, and it is not draining. */
export async function readiness(health: WorkerHealth, p: ReadinessParts): Promise<ProbeVerdict> {
  const reasons: string[] = [];
  if (health.draining)
    reasons.push('draining: it takes no more jobs and lets its calls in flight finish');
  const silence = await redisSilence(p.redis, p.redisTimeoutMs);
  if (silence) return verdict([...reasons, silence]);
  try {
    reasons.push(...(await limitsApart(p)));
  } catch (err) {
    reasons.push(`the fleet's limits could not be read: ${(err as Error).message}`);
  }
  return verdict(reasons);
}
