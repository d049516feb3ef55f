import type { Job } from 'bullmq';
import type { BudgetLedger } from '../shared/budgets.ts';
import type { JobData, JobResult } from '../shared/job.ts';
import type { Limiter } from '../shared/limiter/limiter.ts';
import { header, readRateLimitHeaders } from '../shared/limiter/provider-headers.ts';
import { GLOBAL_SCOPE, type Reservation } from '../shared/limiter/types.ts';
import type { MetricsWriter } from '../shared/metrics.ts';
import { modelScopeAmong } from '../shared/models.ts';
import type { CircuitBreaker } from './breaker.ts';
import { classifyProviderError } from './classify.ts';
import { requestOf } from './combine.ts';
import type { WaitSegment } from './gate-waits.ts';
import type { Handoff } from './handoff.ts';
import type { JobHistory } from './job-history.ts';
import { reportFailure, reportSuccess } from './job-report.ts';
import { JobTrace } from './job-trace.ts';
import type { LearnedCosts } from './learned-costs.ts';
import type { WorkerLogger } from './logger.ts';
import { costMicrosOf } from './money.ts';
import { attemptsUsed, type Outcomes } from './outcome.ts';
import type { ProviderCaller, ProviderCallResult } from './provider.ts';
import { relayedError, type StreamEventPublisher } from './stream-events.ts';

/** One launch of a job: a job fetched again while its earlier entry still finishes is another. */
export interface Running {
  readonly job: Job<JobData, JobResult>;
  readonly token: string;
  reservation: Reservation;
  readonly abort: AbortController;
  readonly done: Promise<void>;
  /** The call has ended and the job only waits to be stored: its slot is free for the gate. */
  ended?: boolean;
  /** What the gate waited for before it took this job. */
  readonly waits?: readonly WaitSegment[] | undefined;
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
  /** Feed the provider's rate-limit headers to the limiter. */
  readonly feedback: boolean;
  /** Publishes stream events of jobs whose caller reads them (the gateway's streams). */
  readonly events?: StreamEventPublisher | undefined;
  /** Money budgets, when configured. */
  readonly ledger?: BudgetLedger | undefined;
  /** Learns from each settle how the provider counts input against the estimate. */
  readonly costs: LearnedCosts;
}

/** Non-streaming calls above this max_tokens are refused by the SDK without a long timeout. */
const STREAM_ABOVE_MAX_TOKENS = 16_000;

/**
 * Runs a job's provider call and hands on its end: the stamp once the response begins, the
 * provider's reading after the stamp, then (success) the settle and the completion, or (failure)
 * a 429's shared pause before the reservation goes back, and the outcome.
 */
export async function runCall(p: CallParts, r: Running, trial: boolean): Promise<void> {
  const { limiter, feedback } = p;
  const { job, token } = r;
  const data = job.data;
  const startedAt = Date.now();
  const t0 = performance.now();
  // The provider limits each model class: its headers update the job's model scope, if any.
  const readingScope = modelScopeAmong(job.data.scopes) ?? GLOBAL_SCOPE;
  let begun = false;
  // The stamp once the response has begun, and the provider's reading after it, if any.
  let stamped: Promise<void> | undefined;
  let reading: Promise<void> | undefined;
  const stream =
    p.stream === 'always' ||
    data.stream === true ||
    data.request.max_tokens > STREAM_ABOVE_MAX_TOKENS;
  // The gateway's relay: events once the response began, an error event if it breaks after.
  const relay = p.events?.open(job.id ?? '', data.relayEvents);
  let res: ProviderCallResult;
  // Telemetry (traces, job log, histograms): see job-trace.ts and job-report.ts.
  const jt = JobTrace.begin(job, r.waits);
  const call: typeof p.call = jt ? (q, o) => jt.around(() => p.call(q, o)) : p.call;
  try {
    res = await call(await requestOf(job), {
      stream,
      timeoutMs: data.timeoutMs ?? p.timeoutMs,
      signal: r.abort.signal,
      headers: data.providerHeaders,
      onEvent: relay?.event,
      onStart: async (headers) => {
        begun = true;
        relay?.start(header(headers, 'request-id') ?? null);
        // Not stamped now means stamped later, at settle or at the lease's end: never too early.
        // The response is read meanwhile. The provider's reading goes once the stamp is
        // answered, so that the calls which began in the same moment (their stamps share its
        // command) also count as ours when it is read; and before this call's settle, whose
        // refund the reading (taken at admission) does not know of.
        const figures = feedback ? readRateLimitHeaders(headers) : {};
        const hasReading = Object.keys(figures).length > 0;
        // Without a reading to follow, the stamp may wait for others, or for this call's settle.
        stamped = limiter.start(r.reservation, { lazy: !hasReading }).catch((err) =>
          p.log.warn('could not stamp the reservation', {
            job: job.id,
            error: (err as Error).message,
          }),
        );
        if (hasReading) {
          // The provider read its counts when it admitted the call, about when it was sent.
          reading = stamped.then(() =>
            limiter
              .observeReading(figures, readingScope, r.reservation, performance.now() - t0)
              .catch(() => {}),
          );
        }
      },
    });
  } catch (err) {
    const latencyMs = performance.now() - t0;
    await relay?.end(relayedError(err));
    // The reading, if any, goes first; a stamp not sent yet is taken back by the end below.
    await reading;
    if (r.abort.signal.aborted) {
      // Shutdown past its grace period: the call may have reached the provider.
      await (begun ? limiter.keep(r.reservation) : limiter.release(r.reservation)).catch(() => {});
      await job.moveToWait(token).catch(() => {});
      return;
    }
    const c = classifyProviderError(err);
    const headers = (err as { headers?: unknown }).headers;
    jt?.failed({ ...c, requestId: (err as { requestID?: string | null }).requestID });
    const report = reportFailure(p, job, r.waits, startedAt, latencyMs, c.reason);
    // A 429's pause goes first: every worker stops before this call's slot and budget come
    // back (which wakes the waiters), and before its reading ends a probe's wait.
    const pausedUntil =
      c.kind === 'rate_limited'
        ? await limiter.pauseFor(c.retryAfterMs ?? 1_000).catch(() => undefined)
        : undefined;
    // Its money goes with it: given back, or (it may have been charged) its worst case spent.
    await (c.maybeCharged ? limiter.keep(r.reservation) : limiter.release(r.reservation));
    if (headers && feedback) {
      await limiter
        .observe(headers as never, readingScope, r.reservation, performance.now() - t0)
        .catch(() => {});
    }
    await p.outcomes.afterFailure(job, token, {
      failure: c,
      startedAt,
      latencyMs,
      trial,
      pausedUntil,
      report,
    });
    return;
  }
  // The call succeeded and was paid for. The budget goes back now, after the provider's
  // reading (settling is batched, and the gate's next reservation is sent after it); the
  // result is stored by the job's completion, which brings the next job along when the gate
  // has reserved for one. A failure in the bookkeeping (the limiter fails fast while Redis
  // reconnects) must not turn a successful call into a retry that calls, and pays, again.
  const usage = res.message.usage;
  jt?.ok(res);
  const providerInput = usage.input_tokens + (usage.cache_creation_input_tokens ?? 0);
  await Promise.all([reading, relay?.end()]);
  const h = [...(job.data.history ?? [])];
  h.push({ at: startedAt, outcome: 'ok', counted: true, latencyMs: Math.round(res.latencyMs) });
  const result: JobResult = {
    message: res.message,
    latencyMs: Math.round(res.latencyMs),
    requestId: res.requestId,
    attempts: attemptsUsed(h),
    completedAt: Date.now(),
  };
  const actual = {
    inputTokens: usage.input_tokens + (usage.cache_creation_input_tokens ?? 0),
    outputTokens: usage.output_tokens,
    // The money the call holds settles to this with its tokens, in one script.
    costMicros: costMicrosOf(p.ledger, data.request.model, usage),
    // Output counts from when it arrived, part by part (under 'actual' accounting).
    outputParts: res.output?.parts(usage.output_tokens),
  };
  const settleAt = Date.now();
  const bookkeeping = Promise.allSettled([
    stamped,
    // Unsettled, the reservation keeps its estimate until its lease ends: safe, not exact.
    limiter
      .settle(r.reservation, actual)
      .then(
        () => jt?.settled(settleAt, actual),
        (err: unknown) => {
          jt?.settled(settleAt, actual, err);
          throw err;
        },
      )
      .catch(async (err: unknown) => {
        // Usage the limiter cannot count (not whole tokens): the estimate stays charged, and
        // the slot comes back now rather than when the lease ends.
        if (err instanceof TypeError) await limiter.keep(r.reservation).catch(() => {});
        throw err;
      }),
    // Gathered with other settles of its model: one command for those (beside the settle's).
    p.costs.record(data, providerInput),
    p.breaker.success(),
    reportSuccess(p, job, r.waits, startedAt, result, {
      provider_calls: 1,
      provider_ok: 1,
      completed: 1,
      tokens_in: usage.input_tokens,
      tokens_out: usage.output_tokens,
    }),
  ]);
  try {
    await p.handoff.complete(r, result);
  } finally {
    for (const a of await bookkeeping) {
      if (a.status === 'rejected')
        p.log.warn('bookkeeping after a successful call failed', {
          job: job.id,
          error: (a.reason as Error).message,
        });
    }
  }
}
