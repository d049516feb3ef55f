import type { Job } from 'bullmq';
import { formatSpan } from '../shared/duration.ts';
import type { AttemptRecord, JobData, JobResult, RetryClock } from '../shared/job.ts';
import type { Limiter } from '../shared/limiter/limiter.ts';
import type { MetricsWriter } from '../shared/metrics.ts';
import type { DeadLetterQueue } from '../shared/queues.ts';
import { type BackoffOptions, fullJitterBackoff } from './backoff.ts';
import type { CircuitBreaker } from './breaker.ts';
import type { Classified } from './classify.ts';
import type { DeadLetterBounds } from './dead-letter-bounds.ts';
import { type DeadLetterCause, deadLetter, restoreFromLetter } from './dead-letters.ts';
import { formatMs } from './gate-waits.ts';
import type { JobHistory } from './job-history.ts';
import { traceOutcome } from './job-trace.ts';
import type { WorkerLogger } from './logger.ts';
import { clockOf, retriedFor, retryForOf, retryForSpent } from './retry-for.ts';

/** Attempts a job has spent: the tries its history counts. */
export const attemptsUsed = (h: readonly AttemptRecord[]): number =>
  h.filter((a) => a.counted).length;

/** What happens to a job after a failed call. */
export type Outcome =
  /** Back to wait at once, no attempt spent (a 429 with retry-after: every worker pauses). */
  | { readonly action: 'requeue'; readonly history: AttemptRecord[]; readonly returns: number }
  /**
   * In a pool, to another deployment at once, no attempt spent: the failure was the
   * deployment's (see {@link deploymentsFault}). `returns`: after a 429, the job's 429 count.
   */
  | { readonly action: 'move'; readonly history: AttemptRecord[]; readonly returns?: number }
  /**
   * Tried again after `delayMs` (0 in an outage: the breaker holds the job back). `retrying` is
   * the job's clock of transient failures, when this one is.
   */
  | {
      readonly action: 'back-off';
      readonly history: AttemptRecord[];
      readonly delayMs: number;
      readonly retrying?: RetryClock | undefined;
    }
  /** To the dead letters: retrying cannot help, or the job has had its tries. */
  | {
      readonly action: 'dead-letter';
      readonly history: AttemptRecord[];
      readonly cause: DeadLetterCause;
    };

export interface OutcomeInput {
  readonly failure: Classified;
  /** The job's history before this call. */
  readonly history: readonly AttemptRecord[];
  /** 429s with retry-after the job has taken before this call. */
  readonly rateLimitReturns: number;
  /** Attempts the job may spend (BullMQ's `attempts`). */
  readonly attemptsAllowed: number;
  /** 429s with retry-after a job may take before it is dead-lettered. */
  readonly maxRateLimitReturns: number;
  /**
   * For a retryable failure: the provider looked healthy (the breaker was closed before and
   * after it, and this was not the breaker's trial call). A failure in an outage spends no
   * attempt and uses up no retryFor.
   */
  readonly healthy: boolean;
  /** How long transient failures may be retried, from the first (ms); 0: they spend attempts. */
  readonly retryForMs: number;
  /** The job's clock of transient failures, if one has started. */
  readonly retrying?: RetryClock | undefined;
  /** When the failure was seen (ms since the epoch). */
  readonly now: number;
  /** The breaker's outage total at this failure (ms). */
  readonly outageMs: number;
  /** When the call began, and how long it took: for the history's record. */
  readonly startedAt: number;
  readonly latencyMs: number;
  readonly backoff?: BackoffOptions | undefined;
  readonly random?: () => number;
  /** The deployment of the pool the call went to, for the history's record. */
  readonly deployment?: string | undefined;
  /** In a pool: another deployment, not yet tried for this job's turn, may take it. */
  readonly elsewhere?: boolean | undefined;
}

/**
 * A failure of the deployment, not of the job: a 429 (that pauses it, or one its key's limits
 * give: its spend limit, `x-should-retry: false`), a 529 or 5xx, a timeout, a dropped or refused
 * connection, an unknown host, a key refused (401, 403).
 */
export const deploymentsFault = (c: Classified): boolean =>
  c.kind === 'rate_limited' ||
  (c.kind === 'retryable' && c.transient === true) ||
  c.keyRefused === true ||
  (c.kind === 'final' && c.status === 429);

/** The policy after a failed call: a pure function of the failure and the job's history. */
export function decideOutcome(input: OutcomeInput): Outcome {
  const c = input.failure;
  const record = (outcome: AttemptRecord['outcome'], counted: boolean): AttemptRecord => ({
    at: input.startedAt,
    outcome,
    counted,
    status: c.status,
    errorClass: c.errorClass,
    message: c.reason,
    latencyMs: Math.round(input.latencyMs),
    ...(input.deployment ? { deployment: input.deployment } : {}),
  });
  if (c.kind === 'rate_limited') {
    const history = [...input.history, record('rate_limited', false)];
    const returns = input.rateLimitReturns + 1;
    if (returns > input.maxRateLimitReturns) {
      const reason = `rate limited ${returns} times: ${c.reason}`;
      return { action: 'dead-letter', history, cause: { ...c, reason } };
    }
    return { action: input.elsewhere ? 'move' : 'requeue', history, returns };
  }
  // Another deployment takes it at once; the last one of the turn to fail decides below.
  if (input.elsewhere && deploymentsFault(c)) {
    const tried =
      c.kind === 'final'
        ? record('final', false)
        : { ...record('retryable', false), transient: true as const };
    return { action: 'move', history: boundHistory([...input.history, tried]) };
  }
  if (c.kind === 'final') {
    return { action: 'dead-letter', history: [...input.history, record('final', true)], cause: c };
  }
  if (c.transient === true && input.retryForMs > 0) return transientOutcome(input, record);
  const counts = input.healthy;
  const history = [...input.history, record('retryable', counts)];
  const used = attemptsUsed(history);
  if (counts && used >= input.attemptsAllowed) {
    const reason = `gave up after ${used} attempt${used === 1 ? '' : 's'}: ${c.reason}`;
    return { action: 'dead-letter', history, cause: { ...c, reason } };
  }
  const delayMs = counts ? fullJitterBackoff(used, input.backoff, input.random) : 0;
  return { action: 'back-off', history, delayMs };
}

/** A transient failure: retried with capped, jittered backoff until retryFor is used up. */
function transientOutcome(
  input: OutcomeInput,
  record: (o: AttemptRecord['outcome'], counted: boolean) => AttemptRecord,
): Outcome {
  const c = input.failure;
  const history = boundHistory([
    ...input.history,
    { ...record('retryable', false), transient: true as const },
  ]);
  const retrying = clockOf(input.retrying, input.now, input.outageMs);
  if (!input.healthy) return { action: 'back-off', history, delayMs: 0, retrying };
  const spent = retriedFor(retrying, input.now, input.outageMs);
  if (spent >= input.retryForMs) {
    const reason = retryForSpent(spent, input.retryForMs, c.reason);
    return { action: 'dead-letter', history, cause: { ...c, reason } };
  }
  const tries = history.filter((a) => a.transient).length;
  // The last try goes when the time runs out, not a whole backoff after.
  const delayMs = Math.min(
    fullJitterBackoff(tries, input.backoff, input.random),
    input.retryForMs - spent,
  );
  return { action: 'back-off', history, delayMs, retrying };
}

/**
 * Records a job's history keeps at most. Retried for days, transient tries would grow it without
 * bound: past this, the oldest transient tries after the first give way.
 */
export const MAX_HISTORY = 100;

function boundHistory(h: AttemptRecord[]): AttemptRecord[] {
  while (h.length > MAX_HISTORY) {
    const i = h.findIndex((a, k) => k > 0 && a.transient && !a.counted);
    if (i < 0) break;
    h.splice(i, 1);
  }
  return h;
}

/** How a failed call ended, as the call saw it. */
export interface FailedCall {
  readonly failure: Classified;
  readonly startedAt: number;
  readonly latencyMs: number;
  /** The breaker's trial call: its failure spends no attempt. */
  readonly trial: boolean;
  /** The shared pause a 429 already set, when it did. */
  readonly pausedUntil?: number | undefined;
  /** The call's fields for the outcome's log line (id, tenant, model, wait, call time). */
  readonly report?: Record<string, unknown> | undefined;
  /** The breaker its failure counts toward: its deployment's, in a pool (else the queue's). */
  readonly breaker?: CircuitBreaker | undefined;
  /** The deployment of the pool it went to, for its history. */
  readonly deployment?: string | undefined;
  /** The scopes it was charged to: a 429 in a pool pauses its deployment only. */
  readonly scopes?: readonly string[] | undefined;
  /**
   * In a pool, with another deployment left to try: admits the job there and makes its call,
   * calling `admitted` first; false when none admits it now.
   */
  readonly moveElsewhere?: ((admitted: () => Promise<void>) => Promise<boolean>) | undefined;
}

/** Carries out the outcome of failed calls; the one path by which jobs reach the dead letters. */
export class Outcomes {
  constructor(
    private readonly parts: {
      readonly dlq: DeadLetterQueue;
      readonly metrics: MetricsWriter;
      readonly limiter: Limiter;
      readonly breaker: CircuitBreaker;
      readonly log: WorkerLogger;
      readonly history: JobHistory;
      readonly maxRateLimitReturns: number;
      /** A job's retryFor when it sets none (ms). */
      readonly retryForMs: number;
      readonly backoff?: BackoffOptions | undefined;
      /** What the queue's dead letters may hold. */
      readonly deadLetterBounds?: DeadLetterBounds | undefined;
    },
  ) {}

  /**
   * Counts a failed call: a 429 pauses every worker, a failure of the provider counts toward
   * the breaker. `healthy` is whether the provider looked healthy (only then is an attempt, or
   * retryFor, spent); `now` is Redis's time of the failure when the breaker read it.
   */
  private async count(
    job: Job<JobData, JobResult>,
    call: FailedCall,
  ): Promise<{ healthy: boolean; outageMs: number; now: number }> {
    const { metrics, log, limiter } = this.parts;
    const breaker = call.breaker ?? this.parts.breaker;
    const c = call.failure;
    let healthy = false;
    let outageMs = 0;
    let now = Date.now();
    if (c.kind === 'rate_limited') {
      const until =
        call.pausedUntil ?? (await limiter.pauseFor(c.retryAfterMs ?? 1_000, call.scopes));
      await metrics.add({ provider_calls: 1, provider_429_retry_after: 1 }, call.deployment);
      log.warn(
        call.deployment
          ? 'provider rate limit: the deployment pauses'
          : 'provider rate limit: every worker pauses',
        {
          job: job.id,
          ...(call.deployment ? { deployment: call.deployment } : {}),
          pausedUntil: new Date(until).toISOString(),
        },
      );
    } else if (c.kind === 'final') {
      // A pool's deployment whose key is refused leaves the pool until a trial call succeeds.
      if (c.keyRefused && call.deployment) await breaker.recordFailure(true);
      await metrics.add(
        c.status === 429
          ? { provider_calls: 1, provider_429_final: 1 }
          : { provider_calls: 1, provider_4xx: 1 },
        call.deployment,
      );
    } else {
      // Counts toward the breaker; an attempt (or retryFor) is spent only while the provider
      // looked healthy, so an outage sends no job to the dead letters, not even one under way
      // when it opened.
      const failure = await breaker.recordFailure(c.unreachable === true);
      const { opened, whileClosed } = failure;
      outageMs = failure.outageMs;
      // The job's retry clock runs on Redis's time, as the outages do: one clock for the fleet.
      now = failure.now || now;
      if (opened)
        log.warn('circuit breaker opened: calls stop until the cool-down ends', { job: job.id });
      await metrics.add(
        c.status === undefined
          ? { provider_calls: 1, provider_connection_errors: 1 }
          : { provider_calls: 1, provider_5xx: 1 },
        call.deployment,
      );
      healthy = whileClosed && !call.trial;
    }
    return { healthy, outageMs, now };
  }

  /** A dead-lettered job back without its letter gets its request back from it. */
  restoreFromLetter(job: Job<JobData, JobResult>): Promise<boolean> {
    return restoreFromLetter(this.parts.dlq, job);
  }

  /** The letter, the job to failed, the counter and the log line. */
  async deadLetter(
    job: Job<JobData, JobResult>,
    token: string,
    cause: DeadLetterCause,
    history: readonly AttemptRecord[] = job.data.history ?? [],
    report: Record<string, unknown> = {},
  ): Promise<void> {
    const line = `dead-lettered: ${cause.reason}`;
    traceOutcome(job, 'llmq.dead_letter', {
      'llmq.reason': cause.reason,
      'error.type': cause.errorClass,
    });
    // Written before the job leaves: a removed job takes no more log lines.
    await this.parts.history.write(job.id, line).catch(() => {});
    await deadLetter(this.parts.dlq, job, token, cause, history, this.parts.deadLetterBounds);
    await this.parts.metrics.add({ dead_lettered: 1 });
    this.parts.log.warn('job dead-lettered', {
      job: job.id,
      // A job that cannot be read may lack them.
      tenant: job.data?.tenant ?? null,
      model: job.data?.request?.model ?? null,
      ...report,
      reason: cause.reason,
    });
  }

  /**
   * Counts a failed call and moves, requeues, backs off or dead-letters its job. A move that
   * finds no other deployment taking the job is decided again as if it had none.
   */
  async afterFailure(job: Job<JobData, JobResult>, token: string, call: FailedCall) {
    const { healthy, outageMs, now } = await this.count(job, call);
    const retryForMs = retryForOf(job.data.retryForMs, this.parts.retryForMs);
    const input: OutcomeInput = {
      failure: call.failure,
      history: job.data.history ?? [],
      rateLimitReturns: job.data.rateLimitReturns ?? 0,
      attemptsAllowed: job.opts.attempts ?? 5,
      maxRateLimitReturns: this.parts.maxRateLimitReturns,
      healthy,
      retryForMs,
      retrying: job.data.retrying,
      now,
      outageMs,
      startedAt: call.startedAt,
      latencyMs: call.latencyMs,
      backoff: this.parts.backoff,
      deployment: call.deployment,
      elsewhere: call.moveElsewhere !== undefined,
    };
    let outcome = decideOutcome(input);
    if (outcome.action === 'move') {
      const move = outcome;
      if (await call.moveElsewhere!(() => this.moved(job, move, call))) return;
      outcome = decideOutcome({ ...input, elsewhere: false });
    }
    // Decided without another deployment, it is never a move.
    if (outcome.action !== 'move')
      await this.carryOut(job, token, outcome, call, { retryForMs, now, outageMs });
  }

  /** A move, once another deployment admitted the job: its history, before the call there. */
  private async moved(
    job: Job<JobData, JobResult>,
    o: Extract<Outcome, { action: 'move' }>,
    call: FailedCall,
  ): Promise<void> {
    const c = call.failure;
    traceOutcome(job, 'llmq.move', { 'llmq.reason': c.reason });
    this.parts.history
      .write(job.id, `to another deployment at once: ${call.deployment} failed`)
      .catch(() => {});
    this.parts.log.info('job moved to another deployment', {
      ...call.report,
      reason: c.reason,
      deployment: call.deployment,
    });
    await this.parts.metrics.add({ retries: 1 });
    await job.updateData({
      ...job.data,
      history: o.history,
      ...(o.returns !== undefined ? { rateLimitReturns: o.returns } : {}),
    });
  }

  /** Requeues, backs off or dead-letters the job. */
  private async carryOut(
    job: Job<JobData, JobResult>,
    token: string,
    outcome: Exclude<Outcome, { action: 'move' }>,
    call: FailedCall,
    clock: { retryForMs: number; now: number; outageMs: number },
  ): Promise<void> {
    const { metrics, log } = this.parts;
    const c = call.failure;
    const report = { ...call.report, reason: c.reason };
    switch (outcome.action) {
      case 'dead-letter':
        return this.deadLetter(job, token, outcome.cause, outcome.history, call.report);
      case 'requeue':
        traceOutcome(job, 'llmq.requeue', { 'llmq.reason': c.reason });
        this.parts.history
          .write(job.id, 'back to wait: the provider rate-limited, every worker pauses')
          .catch(() => {});
        log.info('job requeued', report);
        await job.updateData({
          ...job.data,
          history: outcome.history,
          rateLimitReturns: outcome.returns,
        });
        await job.moveToWait(token);
        return;
      case 'back-off':
        traceOutcome(job, 'llmq.retry', {
          'llmq.retry.delay_ms': outcome.delayMs,
          'llmq.attempt': attemptsUsed(outcome.history),
          'llmq.reason': c.reason,
        });
        this.parts.history
          .write(job.id, retryLine(outcome, clock.retryForMs, clock.now, clock.outageMs))
          .catch(() => {});
        log.info('job retried', { ...report, delayMs: outcome.delayMs });
        await metrics.add({ retries: 1 });
        await job.updateData({
          ...job.data,
          history: outcome.history,
          ...(outcome.retrying ? { retrying: outcome.retrying } : {}),
        });
        await job.moveToDelayed(Date.now() + outcome.delayMs, token);
    }
  }
}

/** The job log's line for a retry: `retry in 1.2 s (transient failures for 34s of 10m 0s)`. */
function retryLine(
  o: Extract<Outcome, { action: 'back-off' }>,
  retryForMs: number,
  now: number,
  outageMs: number,
): string {
  const line = `retry in ${formatMs(o.delayMs)}`;
  if (!o.retrying) return line;
  const spent = retriedFor(o.retrying, now, outageMs);
  return `${line} (transient failures for ${formatSpan(spent)} of ${formatSpan(retryForMs)})`;
}
