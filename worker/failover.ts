/**
 * Failover in a pool, as gateways do it: a call that failed for its deployment's reason
 * (outcome.ts: `deploymentsFault`) goes at once to another deployment that may take the job,
 * admitted the way the gate admits one (pool-admission.ts), each deployment once per turn. The
 * job stays with its worker meanwhile: it does not wait behind the queue again.
 */
import type { Job } from 'bullmq';
import type { BudgetLedger } from '../shared/budgets.ts';
import type { JobData, JobResult } from '../shared/job.ts';
import type { Limiter } from '../shared/limiter/limiter.ts';
import type { Denial } from '../shared/limiter/line.ts';
import type { Reservation } from '../shared/limiter/types.ts';
import type { WaitSegment } from './gate-waits.ts';
import { type HeadJob, headOf } from './head-job.ts';
import type { LearnedCosts } from './learned-costs.ts';
import { chargeOf } from './money.ts';
import type { Deployment, DeploymentPool } from './pool.ts';
import { attemptInPool } from './pool-admission.ts';

/**
 * A move's place in the limiter's line: the most urgent. The job was admitted once already, so
 * its turn is not over: it goes before the jobs waiting for theirs (once per deployment).
 */
const MOVE_PRIORITY = 1;

/** What a move needs of the worker's parts. */
export interface MoveParts {
  readonly pool?: DeploymentPool | undefined;
  readonly limiter: Limiter;
  readonly costs: LearnedCosts;
  readonly ledger?: BudgetLedger | undefined;
  /** The worker stops: a move waits no more (the job goes back to the queue). */
  readonly stopped: AbortSignal;
  /** How many more calls may start on a deployment before it holds its share of the slots. */
  readonly shareRoom?: ((d: Deployment) => number) | undefined;
}

/** Whether a deployment of the pool not in `tried` may take the job. */
export function mayMove(
  pool: DeploymentPool | undefined,
  job: Job<JobData, JobResult>,
  tried: readonly string[],
): boolean {
  const c = pool?.choose({ model: job.data.request.model, deployment: job.data.deployment });
  return c?.ok === true && c.deployments.some((d) => !tried.includes(d.name));
}

/** The job as the gate sees one at the head of the queue: its ticket's cost, scopes, priority. */
function headOfJob(job: Job<JobData, JobResult>): HeadJob {
  const opts = job.opts as { llmq?: unknown };
  return headOf(
    job.id ?? '',
    JSON.stringify(opts),
    opts.llmq ? undefined : JSON.stringify(job.data),
  );
}

/** The move's wait so far, by the limiter's reasons, for the call's report. */
function waited(waits: WaitSegment[], d: Denial, now = Date.now()): void {
  const last = waits.at(-1);
  if (last && last.reason === d.reason && last.scope === d.scope) last.end = now;
  else
    waits.push({ reason: d.reason, scope: d.scope, dimension: d.dimension, start: now, end: now });
}

/**
 * Admits the job into a deployment of the pool not in `tried`, waiting in the limiter's line as
 * the gate does, at its front (a trial call is left to the gate); undefined when none may take it now (their
 * breakers are open, its money budget is spent, it is too big for them, the worker stops).
 */
export async function admitElsewhere(
  p: MoveParts,
  job: Job<JobData, JobResult>,
  tried: readonly string[],
): Promise<{ reservation: Reservation; waits: WaitSegment[] } | undefined> {
  const { pool } = p;
  const [head] = await p.costs.scale([headOfJob(job)]);
  if (!pool || !head || head.problem) return undefined;
  const charge = (h: HeadJob) => chargeOf(p.ledger, h);
  const line = p.limiter.line(charge(head), {
    scopes: head.scopes,
    priority: MOVE_PRIORITY,
    more: [],
  });
  const waits: WaitSegment[] = [];
  const skip = new Set(tried);
  try {
    for (;;) {
      p.stopped.throwIfAborted();
      const a = await attemptInPool({
        pool,
        line,
        head,
        behind: [],
        charge,
        skip,
        trialInFlight: () => true,
        shareRoom: p.shareRoom,
      });
      if (a.ok) return { reservation: a.reservations[0]!, waits };
      if ('problem' in a || 'held' in a || a.denial.money) break;
      waited(waits, a.denial);
      await line.sleep(a, p.stopped);
    }
  } catch {
    // Stopping, too big for the others, or Redis failed: the job goes back to the queue.
  }
  await line.leave().catch(() => {});
  return undefined;
}
