import { setTimeout as sleep } from 'node:timers/promises';
import type { Limiter } from '../shared/limiter/limiter.ts';
import type { Reservation } from '../shared/limiter/types.ts';
import type { CircuitBreaker } from './breaker.ts';
import type { GateWaits } from './gate-waits.ts';
import type { Handoff } from './handoff.ts';
import type { DeploymentPool } from './pool.ts';

/** What the gate's breaker check needs. */
export interface BreakerParts {
  readonly breaker: CircuitBreaker;
  readonly pool?: DeploymentPool | undefined;
  readonly handoff: Handoff;
  readonly limiter: Limiter;
  readonly slots: { trialInFlight(): boolean };
  readonly stopped: AbortSignal;
  readonly waits: GateWaits;
}

/** The breaker's answer for a round; `closed`, when the round goes ahead before it is known. */
export interface RoundBreaker {
  readonly trial: boolean;
  readonly closed?: Promise<boolean>;
}

/**
 * The queue's breaker: whether calls may go out (a trial call goes alone); undefined after
 * holding the round back. A pool's deployments have breakers of their own, checked as a job is
 * admitted into one (pool-admission.ts).
 */
export async function checkBreaker(p: BreakerParts): Promise<RoundBreaker | undefined> {
  if (p.pool) return { trial: false };
  if (p.breaker.closedWhenLastAsked()) {
    // Closed when last asked: the round goes ahead, its check sent just before the acquire on
    // the same connection (one round trip for both, not one each); the take waits for it.
    const closed = p.breaker.check().then((b) => b.allowed && !b.trial);
    closed.catch(() => {});
    return { trial: false, closed };
  }
  const b = await p.breaker.check();
  // Not now, or a trial call, which goes alone: the jobs waiting to be stored do not wait.
  if (!b.allowed || b.trial) p.handoff.completeAlone();
  if (!b.allowed || (b.trial && p.slots.trialInFlight())) {
    const heldAt = Date.now();
    await sleep(b.allowed ? 50 : Math.min(b.waitMs, 1_000), undefined, { signal: p.stopped });
    p.waits.hold('breaker', heldAt);
    return undefined;
  }
  return { trial: b.trial };
}

/**
 * Whether the breaker is still closed, as the round took it to be: else the reservations go
 * back and the round ends (the next one asks the breaker again: it holds back, or makes the
 * trial call), or fails with the check.
 */
export async function stillClosed(
  p: BreakerParts,
  b: RoundBreaker,
  reservations: readonly Reservation[],
): Promise<boolean> {
  if (!b.closed) return true;
  const release = () => Promise.all(reservations.map((r) => p.limiter.release(r).catch(() => {})));
  const closed = await b.closed.catch(async (err: unknown) => {
    await release();
    throw err;
  });
  if (closed) return true;
  p.handoff.completeAlone();
  await release();
  return false;
}
