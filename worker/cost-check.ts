import type { Job } from 'bullmq';
import { costFieldsOf, impliedCost } from '../shared/cost-check.ts';
import type { JobData, JobResult } from '../shared/job.ts';
import { type JobTicket, ticketOfJob } from '../shared/job-ticket.ts';
import type { QueueNames } from '../shared/keys.ts';
import { isModelScope, patternOfScope } from '../shared/models.ts';
import type { RedisClient } from '../shared/redis.ts';
import { writeTicket } from './bullmq-internals.ts';
import type { LearnedCosts } from './learned-costs.ts';
import type { WorkerLogger } from './logger.ts';

/**
 * What a fetched job's claimed cost came to: `ok` (reserved at no less than its request implies),
 * `raise` (its claim is below that: it goes back with `implied` as its ticket), or `unreadable`.
 */
export type CostVerdict =
  | { readonly kind: 'ok' }
  | { readonly kind: 'raise'; readonly implied: JobTicket }
  | { readonly kind: 'unreadable'; readonly newer: boolean; readonly reason: string };

type LlmqJob = Job<JobData, JobResult>;

/**
 * The worker never believes the cost a job claims: the gate reserves its ticket (the only part it
 * reads before a job is fetched), and once the job's request arrives, its cost is recomputed by
 * this build's costing code. A claim that reserved less than that is not sent: its ticket is
 * corrected and it waits for an admission at its real cost, or is dead-lettered by the gate when
 * that can never fit. The recompute runs once per fetch (what BullMQ already parses), never per
 * gate round. A job that passes carries its ticket's cost in its data, the one its call settles.
 */
export class CostCheck {
  private readonly verdicts = new WeakMap<LlmqJob, CostVerdict>();
  private readonly modelPatterns: readonly string[];

  constructor(
    private readonly redis: RedisClient,
    private readonly names: QueueNames,
    /** What the gate reserves for a ticket (its estimate scaled by what was learned). */
    private readonly costs: LearnedCosts,
    private readonly log: WorkerLogger,
    /** The limits of the fleet's scopes: its model scopes say what a model is charged to. */
    scopes: Readonly<Record<string, unknown>> = {},
  ) {
    this.modelPatterns = Object.keys(scopes).filter(isModelScope).map(patternOfScope);
  }

  /** The job's verdict, computed at its first sight in this fetch. */
  verdict(job: LlmqJob): CostVerdict {
    let v = this.verdicts.get(job);
    if (!v) {
      v = this.judge(job);
      this.verdicts.set(job, v);
    }
    return v;
  }

  /** Writes a raised job's implied ticket (it must hold the job's lock); false when it could not. */
  correct(job: LlmqJob, token: string, implied: JobTicket): Promise<boolean> {
    return writeTicket(this.redis, this.names, { id: job.id!, token }, implied);
  }

  private judge(job: LlmqJob): CostVerdict {
    const read = ticketOfJob(job.opts, () => job.data);
    if (!read.ok) return { kind: 'unreadable', newer: read.newer, reason: read.reason };
    const claim = read.ticket;
    let implied: JobTicket;
    let estimate: number;
    try {
      ({ ticket: implied, estimate } = impliedCost(claim, job.data, this.modelPatterns));
    } catch (err) {
      // Its messages are not the API's shape (a job added by other means): it fails alone.
      const reason = `its request cannot be costed (${(err as Error).message})`;
      return { kind: 'unreadable', newer: false, reason };
    }
    if (this.claimsLess(claim, implied)) {
      // A producer of another build, a buggy one, or a job added by other means.
      this.log.warn('a job claimed less than its request costs: it waits for that cost', {
        job: job.id,
        claimed: claim.c,
        costs: implied.c,
      });
      return { kind: 'raise', implied: { ...implied, w: claim.w ?? claim.c } };
    }
    const fields = costFieldsOf(claim);
    // Learning compares the provider's count with this build's estimate, not with a claim above
    // it (a count is not learned from; a combine job's estimate holds its parts' answers).
    const learnFrom = claim.x === 1 || job.data.combine ? fields.cost.inputTokens : estimate;
    job.data = { ...job.data, ...fields, cost: { ...fields.cost, inputTokens: learnFrom } };
    return { kind: 'ok' };
  }

  /** Whether the gate, reserving `claim`, reserved less than `implied` asks for in any way. */
  private claimsLess(claim: JobTicket, implied: JobTicket): boolean {
    const input = (t: JobTicket) =>
      this.costs.costOf({
        cost: costFieldsOf(t).cost,
        model: t.m,
        counted: t.x === 1,
        pdfPages: costFieldsOf(t).pdfPages,
      }).inputTokens;
    return (
      claim.m !== implied.m ||
      String(claim.s ?? []) !== String(implied.s ?? []) ||
      claim.c[0] < implied.c[0] ||
      claim.c[2] < implied.c[2] ||
      input(claim) < input(implied) ||
      cacheClaimsMore(claim.k, implied.k)
    );
  }
}

/** A claimed cached prefix the request does not hold, or larger than it (it lowers the charge). */
function cacheClaimsMore(claim: JobTicket['k'], implied: JobTicket['k']): boolean {
  if (!claim) return false;
  return !implied || claim[0] !== implied[0] || claim[1] > implied[1];
}
