import { CostExceedsLimitError } from '../shared/errors.ts';
import type { Line, LineAttempt } from '../shared/limiter/line.ts';
import type { Charge, Reservation } from '../shared/limiter/types.ts';
import { isModelScope } from '../shared/models.ts';
import { attemptAlong, type FetchAlong, type SentFetch } from './fetch-along.ts';
import type { HeadJob } from './head-job.ts';
import type { Deployment, DeploymentPool, PoolAsk } from './pool.ts';
import type { DeploymentRooms } from './pool-room.ts';

/** What a head job asks of the pool. */
export const askOf = (h: HeadJob): PoolAsk => ({ model: h.model, deployment: h.deployment });

/** One attempt of the gate's line, in or out of a pool. */
export type GateAttempt =
  /** Admitted: the head, then the first of `behind`, one per reservation after the first. */
  | {
      readonly ok: true;
      readonly reservations: Reservation[];
      readonly behind: readonly HeadJob[];
      /** The breaker's trial call (it goes alone). */
      readonly trial: boolean;
      /** The fetches sent with the acquire, when they were (fetch-along.ts). */
      readonly sent?: readonly SentFetch[] | undefined;
    }
  /** Denied; `inPool`: by the room or pause of every deployment that may take the head. */
  | (Extract<LineAttempt, { ok: false }> & { readonly inPool?: true })
  /**
   * Every deployment that may take the head has its breaker open (or its trial under way here),
   * or its calls waiting for their first answer hold its share of this process's slots.
   */
  | { readonly ok: false; readonly held: number }
  /** No deployment may ever take the head (its model is served by none, or its pin is unknown). */
  | { readonly ok: false; readonly problem: string };

/** The pool's parts an attempt uses. */
export interface PoolTry {
  readonly pool: DeploymentPool;
  readonly line: Line;
  readonly head: HeadJob;
  readonly behind: readonly HeadJob[];
  /** What admitting a job charges, before its deployment's scope is added. */
  readonly charge: (h: HeadJob) => Charge;
  /** Whether this process makes a deployment's trial call already. */
  readonly trialInFlight: (deployment: string) => boolean;
  /** The deployments' room, to try the roomiest of equal preference first. */
  readonly rooms?: DeploymentRooms | undefined;
  /** Deployments not to try (a job moved after failing there). */
  readonly skip?: ReadonlySet<string> | undefined;
  /**
   * How many more calls this process may start on a deployment before its calls waiting for
   * their first answer hold its share of the slots (absent: no bound).
   */
  readonly shareRoom?: ((d: Deployment) => number) | undefined;
  /** The fetches to send with an acquire of these jobs (fetch-along.ts); undefined: none. */
  readonly fetchAlong?: ((heads: readonly HeadJob[]) => FetchAlong | undefined) | undefined;
}

/** How soon a head held back by deployments' shares of the slots looks again (ms). */
const SHARE_HELD_MS = 100;

/** A charge that names its own scopes names its deployment's too. */
const into = (c: Charge, d: Deployment): Charge =>
  c.scopes ? { ...c, scopes: [...c.scopes, d.scope] } : c;

/** A job at its whole cost, its cached prefix included. */
const full = (h: HeadJob): HeadJob => (h.warm ? { ...h, cost: h.warm.fullCost } : h);

/** A job as a deployment counts it: a prefix readable only on another is input in full here. */
const on = (h: HeadJob, d: Deployment): HeadJob => (h.warm?.on === d.name ? h : full(h));

/**
 * The order to try the deployments in: the one the head's cached prefix is readable on first
 * (before preference: a read is not counted toward the input limit, and costs a tenth), then by
 * preference, the roomiest first among equal ones.
 */
async function orderFor(t: PoolTry, ds: readonly Deployment[]): Promise<readonly Deployment[]> {
  const warm = t.head.warm?.on;
  const model = t.head.scopes.find(isModelScope);
  const order = t.rooms ? await t.rooms.order(ds, t.charge(full(t.head)), model) : ds;
  const first = order.find((d) => d.name === warm);
  return first ? [first, ...order.filter((d) => d !== first)] : order;
}

/**
 * Whether a denial is the deployment's own (its room, its pause, its share of the fleet's slots
 * held by calls waiting for their first answer): another may admit.
 */
const heldByDeployment = (a: Extract<LineAttempt, { ok: false }>, d: Deployment): boolean =>
  a.denial.reason === 'paused' ||
  ((a.denial.reason === 'budget' || a.denial.reason === 'concurrency') &&
    a.denial.scope === d.scope);

/**
 * Admits the head into the first deployment that may take it and has room, in the order of
 * {@link orderFor}: one atomic acquire per deployment, in turn, with the line's one ticket (a
 * ticket admitted once is never admitted again: the first admission ends the turn). The jobs
 * behind go with it while that deployment may take them too, each charged as it counts them. A denial by a scope the whole pool shares (a tenant, the
 * line, the slots, money) ends the turn at once: no other deployment would admit it either.
 */
export async function attemptInPool(t: PoolTry): Promise<GateAttempt> {
  const { pool, line, head } = t;
  const choice = pool.choose(askOf(head));
  if (!choice.ok) return { ok: false, problem: choice.reason };
  let best: (Extract<LineAttempt, { ok: false }> & { inPool: true }) | undefined;
  let held = Number.POSITIVE_INFINITY;
  let tooBig: CostExceedsLimitError | undefined;
  const ds = choice.deployments.filter((d) => !t.skip?.has(d.name));
  for (const d of await orderFor(t, ds)) {
    const b = await d.breaker.check();
    if (!b.allowed || (b.trial && t.trialInFlight(d.name))) {
      held = Math.min(held, b.allowed ? 50 : b.waitMs);
      continue;
    }
    const room = t.shareRoom?.(d) ?? Number.POSITIVE_INFINITY;
    if (room < 1) {
      held = Math.min(held, SHARE_HELD_MS);
      continue;
    }
    const behind = b.trial ? [] : samePrefix(pool, head, t.behind).slice(0, room - 1);
    const charges = [head, ...behind].map((h) => into(t.charge(on(h, d)), d));
    line.update({ cost: charges[0]!, scopes: [...head.scopes, d.scope], more: charges.slice(1) });
    const a = await attemptAlong(line, t.fetchAlong?.([head, ...behind])).catch((err: unknown) => {
      // Too big for this deployment's limits: another's may be larger.
      if (!(err instanceof CostExceedsLimitError && err.scope === d.scope)) throw err;
      tooBig = err;
      return undefined;
    });
    if (!a) continue;
    if (a.ok) {
      t.rooms?.spent(d, charges.slice(0, a.reservations.length));
      return { ok: true, reservations: a.reservations, behind, trial: b.trial, sent: a.sent };
    }
    if (!heldByDeployment(a, d)) return a;
    if (!best || a.denial.waitMs < best.denial.waitMs) best = { ...a, inPool: true };
  }
  if (best) return best;
  if (Number.isFinite(held) || !tooBig)
    return { ok: false, held: Number.isFinite(held) ? held : 1_000 };
  // It fits no deployment that may take it: it never will (the gate dead-letters it).
  throw tooBig;
}

/**
 * The jobs behind the head, up to the first that may go elsewhere: those that would choose the
 * same deployments, in the same order (a job free to go anywhere does not follow a pinned one).
 */
function samePrefix(
  pool: DeploymentPool,
  head: HeadJob,
  behind: readonly HeadJob[],
): readonly HeadJob[] {
  const key = keyOf(pool, head);
  const i = behind.findIndex((h) => keyOf(pool, h) !== key);
  return i < 0 ? behind : behind.slice(0, i);
}

/** The deployments a job may go to, as one string ('' for none). */
function keyOf(pool: DeploymentPool, h: HeadJob): string {
  const c = pool.choose(askOf(h));
  return c.ok ? c.key : '';
}

/** Whether another job seen may go where the head cannot (a pinned job, another model). */
export function othersGoElsewhere(
  pool: DeploymentPool | undefined,
  head: HeadJob,
  seen: readonly HeadJob[],
): boolean {
  if (!pool) return false;
  const mine = keyOf(pool, head);
  return seen.some(
    (h) => !h.problem && h !== head && keyOf(pool, h) !== '' && keyOf(pool, h) !== mine,
  );
}
