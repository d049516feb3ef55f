import type { Job } from 'bullmq';
import type { JobData, JobResult } from '../shared/job.ts';
import { jobDataProblem } from '../shared/job-ticket.ts';
import type { Limiter } from '../shared/limiter/limiter.ts';
import type { Reservation } from '../shared/limiter/types.ts';
import type { GateWorker, HeadJob } from './bullmq-internals.ts';
import type { CostCheck, CostVerdict } from './cost-check.ts';
import type { SentFetch } from './fetch-along.ts';
import type { Handoff } from './handoff.ts';
import type { LearnedCosts } from './learned-costs.ts';
import type { Outcomes } from './outcome.ts';
import type { DeploymentPool } from './pool.ts';

/** What taking jobs needs, built once per worker. */
export interface TakeParts {
  readonly bull: GateWorker;
  readonly limiter: Limiter;
  readonly handoff: Handoff;
  readonly outcomes: Outcomes;
  /** What to reserve for a job (its estimate scaled by what was learned). */
  readonly costs: LearnedCosts;
  /** Checks a fetched job's claimed cost against its request. */
  readonly check: CostCheck;
  /** The pool of deployments, when the worker has one: a reservation is one deployment's. */
  readonly pool?: DeploymentPool | undefined;
  /** A fresh lock token for a job this worker moves to active. */
  nextToken(): string;
  /** Starts a job's call with its reservation. */
  launch(
    job: Job<JobData, JobResult>,
    token: string,
    reservation: Reservation,
    trial: boolean,
  ): void;
}

export interface TakeHooks {
  /** Once every fetch has been asked for (the gate sends its early peek behind them). */
  readonly onFetchesSent?: (fetches: number) => void;
  /** Once every fetch has been answered. */
  readonly onArrived?: () => void;
}

/** Whether two jobs are charged to the same scopes. */
export const sameScopes = (a: readonly string[], b: readonly string[]): boolean =>
  a.length === b.length && a.every((s, i) => s === b[i]);

/**
 * Moves as many jobs to active as there are reservations and starts them. A job arrives with
 * the reservation made for it; one that another worker's take put in its place uses a spare
 * reservation that covers it (same scopes, no larger, same money budgets), else goes back to
 * wait. What is left unused is released.
 */
export async function takeJobs(
  p: TakeParts,
  wanted: readonly HeadJob[],
  reservations: readonly Reservation[],
  trial: boolean,
  hooks: TakeHooks = {},
  sent?: readonly SentFetch[],
): Promise<number> {
  const { limiter } = p;
  const spare: Spare = new Map();
  wanted.forEach((h, i) => {
    spare.set(h.id, { head: h, reservation: reservations[i]! });
  });
  // Fetched with the acquire; else jobs waiting to be stored fetch first, each in its own
  // completion's command; else one moveToActive each.
  const via = sent ? [] : p.handoff.claim(wanted.length);
  const fetches =
    sent ??
    wanted.map((_, i): SentFetch => {
      const c = via[i];
      const token = c?.r.token ?? p.nextToken();
      return { token, job: c ? p.handoff.fetchVia(c) : p.bull.nextJob(token) };
    });
  let failure: unknown;
  const fetched: { job: Job<JobData, JobResult>; token: string }[] = [];
  // Each fetched job is launched, dead-lettered or put back; each reservation is used or
  // released, whatever fails on the way (a job left active would wait for the stalled check).
  const handled = new Set<Job<JobData, JobResult>>();
  const arrivals = fetches.map(({ token: t, job: fetch }) =>
    fetch
      .then(async (job) => {
        if (!job) return;
        fetched.push({ job, token: t });
        await p.outcomes.restoreFromLetter(job);
        // A job that comes with the reservation made for it starts at once, its call under
        // way while Redis still answers the other fetches.
        const mine =
          job.deferredFailure || jobDataProblem(job.data) || p.check.verdict(job).kind !== 'ok'
            ? undefined
            : spare.get(job.id!);
        if (!mine) return;
        p.launch(job, t, mine.reservation, trial);
        spare.delete(job.id!);
        handled.add(job);
      })
      .catch((err: unknown) => {
        failure ??= err;
      }),
  );
  hooks.onFetchesSent?.(fetches.length);
  await Promise.all(arrivals);
  hooks.onArrived?.();
  // They no longer wait: their sizes and index entries go (not awaited: their calls go on).
  // Fetches sent with the acquire did that in its transaction for the heads reserved for.
  const done = new Set(sent ? wanted.map((h) => h.id) : []);
  p.bull.leftWaiting(fetched.map((f) => f.job).filter((j) => !done.has(j.id!))).catch(() => {});
  try {
    // What is left: jobs another worker's take put in place of ours, and jobs to fail.
    const others = fetched.filter(({ job }) => !handled.has(job));
    others.sort((a, b) => Number(!!b.job.deferredFailure) - Number(!!a.job.deferredFailure));
    for (const { job, token } of others) {
      await placeOther(p, job, token, spare, trial);
      handled.add(job);
    }
  } finally {
    await Promise.all([
      ...[...spare.values()].map(({ reservation }) => limiter.release(reservation).catch(() => {})),
      ...fetched
        .filter(({ job }) => !handled.has(job))
        .map(({ job, token }) => job.moveToWait(token).catch(() => {})),
    ]);
  }
  if (failure) throw failure;
  return fetched.length;
}

/** The reservations of a take not used yet, by the id of the job each was made for. */
type Spare = Map<string, { head: HeadJob; reservation: Reservation }>;

/**
 * A job fetched in place of one reserved for: dead-lettered when it cannot run, started with a
 * spare reservation that covers it, else put back to wait.
 */
async function placeOther(
  p: TakeParts,
  job: Job<JobData, JobResult>,
  token: string,
  spare: Spare,
  trial: boolean,
): Promise<void> {
  const problem = jobDataProblem(job.data);
  if (problem) {
    // Not an llmq job (its data was written by other means): it fails alone, at once.
    await p.outcomes.deadLetter(job, token, {
      reason: `the job cannot be read: ${problem}`,
      errorClass: 'InvalidJobError',
    });
    return;
  }
  if (job.deferredFailure) {
    // BullMQ's stalled check gave this job up (its workers died with it more than
    // maxStalledCount times) and left the failing to whoever takes it next.
    await p.outcomes.deadLetter(job, token, {
      reason: `its worker died with it too many times (${job.deferredFailure})`,
      errorClass: 'StalledJobError',
    });
    return;
  }
  const verdict = p.check.verdict(job);
  if (verdict.kind !== 'ok') {
    await notAsClaimed(p, job, token, verdict);
    return;
  }
  const fit = spareFor(p, job.data, spare);
  if (!fit) {
    // Another worker took a job we reserved for and this one needs more: it goes back.
    await job.moveToWait(token);
    return;
  }
  // Used or not, this reservation is not spare any more: released here if adjust fails.
  spare.delete(fit.head.id);
  const adjusted = await p.limiter
    .adjust(fit.reservation, p.costs.costOfData(job.data))
    .catch(async (err: unknown) => {
      await p.limiter.release(fit.reservation).catch(() => {});
      throw err;
    });
  p.launch(job, token, adjusted, trial);
}

/**
 * A job whose ticket cannot be read is dead-lettered (one of a newer format goes back for a
 * worker that reads it); one that claims less than its request implies goes back with the cost
 * it implies as its ticket, to be admitted at that (or dead-lettered when that never fits).
 */
async function notAsClaimed(
  p: TakeParts,
  job: Job<JobData, JobResult>,
  token: string,
  verdict: Exclude<CostVerdict, { kind: 'ok' }>,
): Promise<void> {
  if (verdict.kind === 'raise') await p.check.correct(job, token, verdict.implied);
  else if (!verdict.newer) {
    await p.outcomes.deadLetter(job, token, {
      reason: `the job cannot be read: ${verdict.reason}`,
      errorClass: 'InvalidJobError',
    });
    return;
  }
  await job.moveToWait(token);
}

/**
 * A spare reservation that covers a job: same scopes, no smaller, and (one holding money) the
 * same tenant and model, whose hold (its worst case, no less than this job's) settles to this
 * job's cost at its end; in a pool, of a deployment that may take the job.
 */
function spareFor(p: TakeParts, data: JobData, spare: Spare) {
  const c = p.costs.costOfData(data);
  const ask = { model: data.request.model, deployment: data.deployment };
  return [...spare.values()].find(({ head, reservation }) => {
    const d = p.pool?.of(reservation);
    return (
      c.inputTokens <= reservation.cost.inputTokens &&
      c.outputTokens <= reservation.cost.outputTokens &&
      sameScopes(data.scopes ?? [], head.scopes) &&
      (!reservation.cost.money ||
        (data.tenant === head.tenant && data.request.model === head.model)) &&
      (!p.pool || (d !== undefined && p.pool.serves(d, ask)))
    );
  });
}
