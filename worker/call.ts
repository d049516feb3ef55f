import type { Job } from 'bullmq';
import type { BudgetLedger } from '../shared/budgets.ts';
import type { JobData, JobResult } from '../shared/job.ts';
import type { JobTicket } from '../shared/job-ticket.ts';
import type { CallHandle } from '../shared/limiter/call.ts';
import type { Limiter } from '../shared/limiter/limiter.ts';
import { GLOBAL_SCOPE, type Reservation } from '../shared/limiter/types.ts';
import type { MetricsWriter } from '../shared/metrics.ts';
import { modelScopeAmong } from '../shared/models.ts';
import { type HeaderSource, header } from '../shared/provider-headers.ts';
import type { CircuitBreaker } from './breaker.ts';
import { classifyProviderError } from './classify.ts';
import { requestOf } from './combine.ts';
import { admitElsewhere, mayMove } from './failover.ts';
import type { WaitSegment } from './gate-waits.ts';
import { type Handoff, lockLost } from './handoff.ts';
import type { JobHistory } from './job-history.ts';
import { logCompleted, reportFailure, reportSuccess } from './job-report.ts';
import { JobTrace } from './job-trace.ts';
import type { LearnedCosts } from './learned-costs.ts';
import type { WorkerLogger } from './logger.ts';
import { costMicrosOf } from './money.ts';
import { attemptsUsed, type Outcomes } from './outcome.ts';
import { type Deployment, type DeploymentPool, platformModelOf } from './pool.ts';
import type { CacheUsage, PromptCaches } from './prompt-caches.ts';
import type { ProviderCaller, ProviderCallResult } from './provider.ts';
import { boundsFor, type ResponseTimeouts } from './response-bounds.ts';
import { relayedError, type StreamEventPublisher } from './stream-events.ts';

/**
 * One launch of a job. A job this worker fetches again while its call still runs (its lock
 * lapsed: the process was stopped past it) is not launched again: the running one takes the new
 * lock's token.
 */
export interface Running {
  readonly job: Job<JobData, JobResult>;
  token: string;
  reservation: Reservation;
  readonly abort: AbortController;
  readonly done: Promise<void>;
  /** The call has ended and the job only waits to be stored: its slot is free for the gate. */
  ended?: boolean;
  /** Its current call's response began (headers in hand): it no longer waits on the provider. */
  answered?: boolean;
  /** What the gate waited for before it took this job (a move: what the move waited for). */
  waits?: readonly WaitSegment[] | undefined;
}

/** What a call needs, built once per worker. */
export interface CallParts {
  readonly call: ProviderCaller;
  readonly limiter: Limiter;
  readonly breaker: CircuitBreaker;
  readonly metrics: MetricsWriter;
  readonly handoff: Handoff;
  readonly outcomes: Outcomes;
  readonly log: WorkerLogger;
  readonly history: JobHistory;
  readonly stream: 'always' | 'auto';
  /** Per-call timeout when the job sets none. */
  readonly timeoutMs: number;
  /** How long the provider may stay silent (a pool's deployment may set its own). */
  readonly timeouts: ResponseTimeouts;
  /** Feed the provider's rate-limit headers to the limiter. */
  readonly feedback: boolean;
  /** Publishes stream events of jobs whose caller reads them (the gateway's streams). */
  readonly events?: StreamEventPublisher | undefined;
  /** Money budgets, when configured. */
  readonly ledger?: BudgetLedger | undefined;
  /** Learns from each settle how the provider counts input against the estimate. */
  readonly costs: LearnedCosts;
  /** Prompt caching: a cached prefix is readable once its writer's first token arrived. */
  readonly caches: PromptCaches;
  /** The pool of deployments, when the worker has one: each call goes to its reservation's. */
  readonly pool?: DeploymentPool | undefined;
  /** How many more calls may start on a deployment before it holds its share of the slots. */
  readonly shareRoom?: ((d: Deployment) => number) | undefined;
  /** The worker stops. */
  readonly stopped: AbortSignal;
  /** Whether a lock token is one of this worker's. */
  readonly ownsToken: (token: string) => boolean;
}

/** Where a call goes: the caller, the breaker, the scope its readings describe, the model id. */
interface Target {
  readonly call: ProviderCaller;
  readonly breaker: CircuitBreaker;
  readonly readings: string;
  readonly model: string;
  /** How long it may stay silent. */
  readonly timeouts: ResponseTimeouts;
  /** The deployment's name, in a pool. */
  readonly deployment?: string | undefined;
}

/**
 * The call of a reservation admitted into a pool's deployment goes to that deployment (its
 * caller, its breaker, its scope for the readings of its headers, its platform's model id);
 * else to the queue's one provider, whose readings describe the job's model scope, if any.
 */
function targetOf(p: CallParts, r: Running): Target {
  const data = r.job.data;
  const d = p.pool?.of(r.reservation);
  if (!d) {
    const readings = modelScopeAmong(data.scopes) ?? GLOBAL_SCOPE;
    const model = data.request.model;
    return { call: p.call, breaker: p.breaker, readings, model, timeouts: p.timeouts };
  }
  const model = platformModelOf(d.config, data.request.model) ?? data.request.model;
  const timeouts = {
    firstByteMs: d.config.firstByteTimeoutMs ?? p.timeouts.firstByteMs,
    idleMs: d.config.idleTimeoutMs ?? p.timeouts.idleMs,
  };
  return {
    call: d.call,
    breaker: d.breaker,
    readings: d.scope,
    model,
    timeouts,
    deployment: d.name,
  };
}

/** Non-streaming calls above this max_tokens are refused by the SDK without a long timeout. */
const STREAM_ABOVE_MAX_TOKENS = 16_000;

/**
 * Runs a job's provider call and hands on its end through the limiter's call handle, which
 * orders it: the stamp and the provider's reading once the response begins; then (success) the
 * settle and the completion, or (failure) a 429's shared pause before the budget comes back.
 */
export async function runCall(
  p: CallParts,
  r: Running,
  trial: boolean,
  tried: readonly string[] = [],
): Promise<void> {
  const { job } = r;
  const data = job.data;
  const startedAt = Date.now();
  const t0 = performance.now();
  const target = targetOf(p, r);
  r.answered = false;
  const call = p.limiter.call(r.reservation, target.readings);
  const stream =
    p.stream === 'always' ||
    data.stream === true ||
    data.request.max_tokens > STREAM_ABOVE_MAX_TOKENS;
  // The gateway's relay: events once the response began, an error event if it breaks after.
  const relay = p.events?.open(job.id ?? '', data.relayEvents);
  // Telemetry (traces, job log, histograms): see job-trace.ts and job-report.ts.
  const jt = JobTrace.begin(job, r.waits);
  const provider: ProviderCaller = jt ? (q, o) => jt.around(() => target.call(q, o)) : target.call;
  let res: ProviderCallResult;
  let begun: Promise<void> | undefined;
  // The job's cached prefix: readable by the others from its first token on.
  const prefix = (job.opts as { llmq?: JobTicket }).llmq?.k?.[0];
  let answered: Promise<void> | undefined;
  const onFirstToken = prefix
    ? (usage: CacheUsage) => {
        answered = p.caches.answered(prefix, usage, target.deployment).catch(() => {});
      }
    : undefined;
  try {
    res = await provider(withModel(await requestOf(job), target.model), {
      onFirstToken,
      stream,
      timeoutMs: data.timeoutMs ?? p.timeoutMs,
      bounds: boundsFor(target.timeouts, {
        inputTokens: r.reservation.cost.inputTokens,
        maxTokens: data.request.max_tokens,
        stream,
      }),
      signal: r.abort.signal,
      headers: data.providerHeaders,
      onEvent: relay?.event,
      onStart: async (headers, sentAgoMs) => {
        r.answered = true;
        relay?.start(header(headers, 'request-id') ?? null);
        // Stamped now that the provider admitted it; the body is read meanwhile.
        begun = call
          .begin(p.feedback ? headers : undefined, sentAgoMs ?? performance.now() - t0)
          .catch((err: unknown) =>
            p.log.warn('could not stamp the reservation', {
              job: job.id,
              error: (err as Error).message,
            }),
          );
      },
    });
  } catch (err) {
    await relay?.end(relayedError(err));
    await begun;
    // A writer that failed before its prefix could be read: another job may write it.
    if (prefix && !answered) await p.caches.failed(prefix, job.id ?? '').catch(() => {});
    return failedCall(p, r, call, err, { trial, startedAt, t0, jt, target, tried });
  }
  // Its use keeps the prefix readable (an answer not streamed tells it only now).
  if (prefix)
    answered = p.caches.answered(prefix, res.message.usage, target.deployment).catch(() => {});
  await Promise.all([begun, relay?.end(), answered]);
  return succeededCall(p, r, call, res, { startedAt, jt, target });
}

/** The request with the model id its deployment's platform uses. */
const withModel = <R extends { model: string }>(req: R, model: string): R =>
  req.model === model ? req : { ...req, model };

interface CallTimes {
  readonly startedAt: number;
  readonly t0: number;
  readonly trial: boolean;
  readonly jt: JobTrace | undefined;
  readonly target: Target;
  /** The deployments this turn of the job failed on before (a move skips them). */
  readonly tried: readonly string[];
}

/** A failed call: a 429's pause, its budget back (or kept), the outcome. */
async function failedCall(
  p: CallParts,
  r: Running,
  call: CallHandle,
  err: unknown,
  t: CallTimes,
): Promise<void> {
  const { job, token } = r;
  const latencyMs = performance.now() - t.t0;
  if (r.abort.signal.aborted) {
    // Shutdown past its grace period: the call may have reached the provider.
    await call.abandoned().catch(() => {});
    await job.moveToWait(token).catch(() => {});
    return;
  }
  const c = classifyProviderError(err);
  const headers = (err as { headers?: HeaderSource }).headers;
  t.jt?.failed({ ...c, requestId: (err as { requestID?: string | null }).requestID });
  const where = t.target.deployment;
  const report = reportFailure(p, job, r.waits, t.startedAt, latencyMs, c.reason, where);
  // A 429 pauses every worker before this call's budget comes back (which wakes the waiters).
  const pauseMs = c.kind === 'rate_limited' ? (c.retryAfterMs ?? 1_000) : undefined;
  const pausedUntil = await call
    .failed({ pauseMs, charged: c.maybeCharged }, p.feedback ? headers : undefined, latencyMs)
    .catch(() => undefined);
  await p.outcomes.afterFailure(job, token, {
    failure: c,
    startedAt: t.startedAt,
    latencyMs,
    trial: t.trial,
    pausedUntil,
    report,
    breaker: t.target.breaker,
    deployment: t.target.deployment,
    scopes: r.reservation.scopes,
    moveElsewhere: moverOf(p, r, t),
  });
}

/**
 * In a pool, a move of the job to a deployment it has not failed on this turn: admitted there,
 * its history written (`admitted`), then its call. Undefined when no other may take it.
 */
function moverOf(p: CallParts, r: Running, t: CallTimes) {
  const d = t.target.deployment;
  const tried = d ? [...t.tried, d] : t.tried;
  if (!d || !mayMove(p.pool, r.job, tried)) return undefined;
  return async (admitted: () => Promise<void>): Promise<boolean> => {
    const got = await admitElsewhere(p, r.job, tried);
    if (!got) return false;
    try {
      await admitted();
    } catch (err) {
      await p.limiter.release(got.reservation).catch(() => {});
      throw err;
    }
    r.reservation = got.reservation;
    r.waits = got.waits;
    await runCall(p, r, false, tried);
    return true;
  };
}

/**
 * The call succeeded and was paid for. The budget goes back now (the settle is batched, and the
 * gate's next reservation is sent after it); the result is stored by the job's completion, which
 * brings the next job along when the gate has reserved for one. A failure in the bookkeeping
 * must not turn a successful call into a retry that calls, and pays, again.
 */
async function succeededCall(
  p: CallParts,
  r: Running,
  call: CallHandle,
  res: ProviderCallResult,
  t: Pick<CallTimes, 'startedAt' | 'jt' | 'target'>,
): Promise<void> {
  const { job } = r;
  const data = job.data;
  const usage = res.message.usage;
  t.jt?.ok(res);
  const h = [...(data.history ?? [])];
  const deployment = t.target.deployment;
  h.push({
    at: t.startedAt,
    outcome: 'ok',
    counted: true,
    latencyMs: Math.round(res.latencyMs),
    ...(deployment ? { deployment } : {}),
  });
  const result: JobResult = {
    message: res.message,
    latencyMs: Math.round(res.latencyMs),
    requestId: res.requestId,
    attempts: attemptsUsed(h),
    completedAt: Date.now(),
    ...(deployment ? { deployment } : {}),
  };
  const actual = {
    // Cache reads do not count toward the input limit; cache writes do.
    inputTokens: usage.input_tokens + (usage.cache_creation_input_tokens ?? 0),
    outputTokens: usage.output_tokens,
    // The money the call holds settles to this with its tokens, in one script.
    costMicros: costMicrosOf(p.ledger, data.request.model, usage),
  };
  const settleAt = Date.now();
  const bookkeeping = Promise.allSettled([
    call.succeeded(actual).then(
      () => t.jt?.settled(settleAt, actual),
      (err: unknown) => {
        t.jt?.settled(settleAt, actual, err);
        throw err;
      },
    ),
    p.costs.record(data, usage),
    t.target.breaker.success(),
    reportSuccess(p, job, r.waits, t.startedAt, result, r.reservation.cost, {
      provider_calls: 1,
      provider_ok: 1,
      completed: 1,
      tokens_in: usage.input_tokens,
      tokens_out: usage.output_tokens,
    }),
  ]);
  let stored: boolean;
  try {
    stored = await storeResult(p, r, result);
  } finally {
    for (const a of await bookkeeping) {
      if (a.status === 'rejected')
        p.log.warn('bookkeeping after a successful call failed', {
          job: job.id,
          error: (a.reason as Error).message,
        });
    }
  }
  if (stored) logCompleted(p, job, r.waits, t.startedAt, result);
}

/**
 * Stores a successful call's result; false when another worker took its job while its lock had
 * lapsed (this call was made twice, and paid twice: counted, logged, and its result dropped).
 */
async function storeResult(p: CallParts, r: Running, result: JobResult): Promise<boolean> {
  try {
    await p.handoff.complete(r, result);
    return true;
  } catch (err) {
    if (!lockLost(err)) throw err;
  }
  const late = await p.handoff.completeLate(r, result, p.ownsToken);
  if (late.stored) return true;
  await p.metrics.add({ duplicate_calls: 1 }).catch(() => {});
  p.log.warn('job called twice: its lock lapsed while the call ran and another worker took it', {
    job: r.job.id,
    anotherWorker: late.holder === null ? 'finished it' : 'holds it',
    deployment: result.deployment ?? null,
  });
  return false;
}
