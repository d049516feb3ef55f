import type { Job } from 'bullmq';
import type { BudgetExhaustedError, BudgetLedger } from '../shared/budgets.ts';
import type { JobData, JobResult } from '../shared/job.ts';
import type { MetricsWriter } from '../shared/metrics.ts';
import type { HeadPeeker } from './bullmq-internals.ts';
import type { DeadLetterCause } from './dead-letters.ts';
import type { FairShare } from './fair-share.ts';
import type { WorkerLogger } from './logger.ts';
import type { TakeParts } from './take.ts';

/** How long a job of a newer format waits before a worker looks at it again. */
const NEWER_FORMAT_DELAY_MS = 60_000;

/** The gate's parts that moving a head job aside needs. */
export interface HeadMoveParts extends Pick<TakeParts, 'bull' | 'outcomes' | 'nextToken'> {
  readonly log: WorkerLogger;
  readonly metrics: MetricsWriter;
  readonly peeker: HeadPeeker;
  readonly ledger: BudgetLedger | undefined;
  readonly fair: FairShare | undefined;
}

/**
 * What the gate does with a head job it does not start: defers it, holds it for its money
 * budget, sets it aside, or dead-letters it. Each moves it to active for that one move only.
 */
export class HeadMoves {
  constructor(private readonly p: HeadMoveParts) {}

  /**
   * Moves a job that only its own scope's budget holds back to the delayed set until that budget
   * frees (no attempt spent), so the jobs behind it go ahead. It is active for that one move only.
   */
  async defer(jobId: string, waitMs: number): Promise<void> {
    const taken = await this.takeHead(jobId);
    if (!taken) return;
    const { job, token } = taken;
    // The wait is an upper bound while the scope's calls are in flight (they free their budget
    // when they settle, not at a known time): look again within a second.
    await job.moveToDelayed(Date.now() + Math.min(Math.max(waitMs, 10), 1_000), token);
    await this.p.metrics.add({ deferred_by_scope: 1 });
  }

  /** Moves the head job to active to act on it; undefined (and put back) when another came first. */
  private async takeHead(
    headId: string,
  ): Promise<{ job: Job<JobData, JobResult>; token: string } | undefined> {
    // Fair share's head need not be where BullMQ hands out next: put it there first, or another
    // tenant's job comes out instead, round after round.
    const head = { id: headId, reservation: '' };
    if (this.p.fair && (await this.p.peeker.moveToFront([head])).length === 0) return undefined;
    const token = this.p.nextToken();
    const job = await this.p.bull.nextJob(token);
    if (!job) return undefined;
    if (job.id !== headId) {
      await job.moveToWait(token);
      return undefined;
    }
    return { job, token };
  }

  /**
   * The head job's money budget is spent (the limiter said so at admission, holding nothing):
   * by policy it waits (delayed) until the budget's period ends, or goes to the dead letters
   * with budget_exhausted.
   */
  async holdForBudget(headId: string, over: BudgetExhaustedError): Promise<void> {
    const taken = await this.takeHead(headId);
    if (!taken) return;
    const { job, token } = taken;
    if (this.p.ledger?.settings.policy === 'dead-letter' || over.resetsAt === undefined) {
      await this.deadLetterTaken(job, token, {
        reason: over.message,
        errorClass: 'BudgetExhaustedError',
      });
      return;
    }
    await job.moveToDelayed(over.resetsAt, token);
    await this.p.metrics.add({ deferred_by_budget: 1 });
  }

  /**
   * A head that cannot be scheduled does not hold the queue: one that is no llmq job is
   * dead-lettered at once with what is wrong; one of a newer format is left, delayed, for a
   * worker that reads it (said in the log).
   */
  async setAside(headId: string, problem: { newer: boolean; reason: string }) {
    const taken = await this.takeHead(headId);
    if (!taken) return;
    const { job, token } = taken;
    if (problem.newer) {
      this.p.log.warn('left a job for a worker of a newer llmq', {
        job: headId,
        why: problem.reason,
      });
      await job.moveToDelayed(Date.now() + NEWER_FORMAT_DELAY_MS, token);
      return;
    }
    await this.deadLetterTaken(job, token, {
      reason: `the job cannot be read: ${problem.reason}`,
      errorClass: 'InvalidJobError',
    });
  }

  /** Dead-letters the head job (it can never fit, or no deployment may take it). */
  async deadLetter(headId: string, cause: DeadLetterCause): Promise<void> {
    const taken = await this.takeHead(headId);
    if (!taken) return;
    await this.deadLetterTaken(taken.job, taken.token, cause);
  }

  /** A head taken only to be dead-lettered no longer waits: the depth bound forgets its bytes. */
  private async deadLetterTaken(
    job: Job<JobData, JobResult>,
    token: string,
    cause: DeadLetterCause,
  ): Promise<void> {
    await this.p.bull.leftWaiting([job]).catch(() => {});
    await this.p.outcomes.deadLetter(job, token, cause);
  }
}
