import type { Job } from 'bullmq';
import { actualMicros, type BudgetLedger } from '../shared/budgets.ts';
import type { Cost } from '../shared/estimate.ts';
import type { GateWaitMs } from '../shared/history.ts';
import type { JobData, JobResult } from '../shared/job.ts';
import type { JobObservation, MetricsWriter } from '../shared/metrics.ts';
import { costMicros, type PricedUsage, priceOf } from '../shared/prices.ts';
import { describeWaits, formatMs, totalWaitMs, type WaitSegment } from './gate-waits.ts';
import type { JobHistory } from './job-history.ts';
import type { WorkerLogger } from './logger.ts';

/** Where a try's story goes: the log line, the job's own log, the histograms. */
export interface ReportParts {
  readonly log: WorkerLogger;
  readonly history: JobHistory;
  readonly metrics: MetricsWriter;
  /** With budgets: their price table (the config's prices) for the spend. */
  readonly ledger?: BudgetLedger | undefined;
}

/** The gate's waits of a job by reason, for the usage history. */
export function gateWaitMs(waits: readonly WaitSegment[] | undefined): GateWaitMs {
  const ms = { budget: 0, paused: 0, concurrency: 0, queued: 0 };
  for (const w of waits ?? []) {
    const d = Math.max(0, w.end - w.start);
    if (w.reason === 'budget' || w.reason === 'money') ms.budget += d;
    else if (w.reason === 'paused' || w.reason === 'breaker') ms.paused += d;
    else if (w.reason === 'concurrency' || w.reason === 'slots') ms.concurrency += d;
    else ms.queued += d;
  }
  return ms;
}

/** A call's cost in µ$: at the budgets' prices when set, else at the shipped list prices. */
function spendMicros(p: ReportParts, model: string, usage: PricedUsage): number {
  if (p.ledger) return actualMicros(p.ledger.settings, model, usage);
  const price = priceOf(model);
  return price ? costMicros(price, usage) : 0;
}

/** From enqueue, or the end of the job's previous try, to this call's start. */
export function queuedMs(data: JobData, startedAt: number): number {
  const last = data.history?.at(-1);
  const from = last ? last.at + (last.latencyMs ?? 0) : data.enqueuedAt;
  return Math.max(0, startedAt - from);
}

/**
 * The fields of a job's outcome line: id, tenant, model, the pool's deployment that took the call
 * (in a pool), wait and call time (tokens when known).
 */
export function outcomeFields(
  job: Job<JobData, JobResult>,
  waits: readonly WaitSegment[] | undefined,
  startedAt: number,
  callMs: number,
  deployment?: string | undefined,
): Record<string, unknown> {
  const d = job.data;
  return {
    job: job.id,
    tenant: d.tenant ?? null,
    model: d.request.model,
    ...(deployment !== undefined ? { deployment } : {}),
    waitMs: queuedMs(d, startedAt),
    gateWaitMs: totalWaitMs(waits),
    callMs: Math.round(callMs),
  };
}

/** `admitted after 2.3 s (budget (global outputTokens) 1.9 s)`. */
function admittedLine(waitMs: number, waits: readonly WaitSegment[] | undefined): string {
  const why = waits?.length ? ` (gate: ${describeWaits(waits)})` : '';
  return `admitted after ${formatMs(waitMs)} in the queue${why}`;
}

/**
 * A successful call: the job's log, the histograms and counters; `reserved`: what its
 * reservation held (the estimate), for the usage history. Its line is logged once its result is
 * stored ({@link logCompleted}).
 */
export function reportSuccess(
  p: ReportParts,
  job: Job<JobData, JobResult>,
  waits: readonly WaitSegment[] | undefined,
  startedAt: number,
  result: JobResult,
  reserved: Cost,
  add: Parameters<MetricsWriter['observe']>[1],
): Promise<unknown> {
  const u = result.message.usage;
  const f = outcomeFields(job, waits, startedAt, result.latencyMs);
  const o: JobObservation = {
    jobId: job.id,
    model: job.data.request.model,
    tenant: job.data.tenant,
    waitMs: f['waitMs'] as number,
    callMs: result.latencyMs,
    inputTokens: u.input_tokens,
    outputTokens: u.output_tokens,
    cacheWriteTokens: u.cache_creation_input_tokens ?? undefined,
    costMicros: spendMicros(p, job.data.request.model, u),
    reservedInputTokens: reserved.inputTokens,
    reservedOutputTokens: reserved.outputTokens,
    gate: gateWaitMs(waits),
    ok: true,
  };
  return Promise.all([
    p.metrics.observe(o, add, result.deployment),
    plainSuccess(job, waits)
      ? undefined
      : p.history.write(
          job.id,
          admittedLine(o.waitMs, waits),
          `call ok in ${formatMs(result.latencyMs)}: ${u.input_tokens} input, ${u.output_tokens} output tokens (request ${result.requestId ?? 'unknown'})`,
        ),
  ]);
}

/**
 * A job taken once, never held by the gate, answered on its first call: its log would only
 * repeat its result (latency, usage, request id) and its timestamps, so it writes none. Redis
 * keeps a finished job's log as long as the job (about 0.4 KB a job).
 */
function plainSuccess(job: Job<JobData, JobResult>, waits: readonly WaitSegment[] | undefined) {
  return !waits?.length && job.attemptsStarted <= 1 && job.attemptsMade === 0;
}

/** The line of a job whose result was stored. */
export function logCompleted(
  p: Pick<ReportParts, 'log'>,
  job: Job<JobData, JobResult>,
  waits: readonly WaitSegment[] | undefined,
  startedAt: number,
  result: JobResult,
): void {
  const u = result.message.usage;
  p.log.info('job completed', {
    ...outcomeFields(job, waits, startedAt, result.latencyMs, result.deployment),
    inputTokens: u.input_tokens,
    outputTokens: u.output_tokens,
    attempts: result.attempts,
    requestId: result.requestId,
  });
}

/**
 * A failed call (on `deployment`, in a pool): its history lines and histograms; the outcome
 * logs its own line, with these fields.
 */
export function reportFailure(
  p: ReportParts,
  job: Job<JobData, JobResult>,
  waits: readonly WaitSegment[] | undefined,
  startedAt: number,
  latencyMs: number,
  reason: string,
  deployment?: string | undefined,
): Record<string, unknown> {
  const f = outcomeFields(job, waits, startedAt, latencyMs, deployment);
  const waitMs = f['waitMs'] as number;
  p.metrics
    .observe({
      jobId: job.id,
      model: job.data.request.model,
      tenant: job.data.tenant,
      waitMs,
      callMs: latencyMs,
      gate: gateWaitMs(waits),
      ok: false,
    })
    .catch(() => {});
  p.history
    .write(
      job.id,
      admittedLine(waitMs, waits),
      `call failed after ${formatMs(latencyMs)}: ${reason}`,
    )
    .catch(() => {});
  return f;
}
