import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type Anthropic from '@anthropic-ai/sdk';
import { type Job, Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import { CostExceedsLimitError, LimiterUnavailableError } from '../shared/errors.ts';
import type { AttemptRecord, JobData, JobResult } from '../shared/job.ts';
import { bullPrefix, type QueueNames } from '../shared/keys.ts';
import { Limiter, type LimiterOptions } from '../shared/limiter/limiter.ts';
import { readRateLimitHeaders } from '../shared/limiter/provider-headers.ts';
import { GLOBAL_SCOPE, type Reservation } from '../shared/limiter/types.ts';
import { MetricsWriter } from '../shared/metrics.ts';
import { type DeadLetterQueue, openDeadLetterQueue, registerQueue } from '../shared/queues.ts';
import { type BackoffOptions, fullJitterBackoff } from './backoff.ts';
import { type BreakerOptions, CircuitBreaker } from './breaker.ts';
import { type Classified, classifyProviderError } from './classify.ts';
import { deadLetter } from './dead-letters.ts';
import { type HeadJob, HeadPeeker } from './head.ts';
import { callProvider, type ProviderCaller, type ProviderCallResult } from './provider.ts';

/** Where the worker reports what it does; the CLI prints these, tests collect them. */
export interface WorkerLogger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
}

const silent: WorkerLogger = { info() {}, warn() {} };

export interface WorkerOptions {
  /** A connection for the limiter, the breaker and the gate (not owned). */
  readonly redis: Redis;
  readonly names: QueueNames;
  /** The provider client, built with `createProviderClient` (SDK retries off). */
  readonly client?: Anthropic;
  /**
   * How a call is made, when not through `client`: see {@link ProviderCaller}. One of `client`
   * and `provider` is required.
   */
  readonly provider?: ProviderCaller;
  /** The shared budget: limits, window, global concurrency cap, headroom, accounting. */
  readonly limiter: Omit<LimiterOptions, 'redis' | 'names'>;
  /** Calls this process runs at once. @default the limiter's concurrency, else 10 */
  readonly concurrency?: number;
  /**
   * `always`: stream every call, so the response's headers arrive the moment the provider
   * admits it and the window is stamped then; `auto`: stream when the job asks or max_tokens
   * needs it. @default 'always'
   */
  readonly stream?: 'always' | 'auto';
  /** Per-call timeout when the job sets none. @default 600_000 */
  readonly timeoutMs?: number;
  readonly backoff?: BackoffOptions;
  readonly breaker?: BreakerOptions;
  /** 429s with retry-after a job may take before it is dead-lettered. @default 20 */
  readonly maxRateLimitReturns?: number;
  /** BullMQ lock of an active job; a killed worker's job is recovered after it. @default 30_000 */
  readonly lockDurationMs?: number;
  /**
   * Times a job may be recovered from a dead worker before it is given up (and dead-lettered:
   * a job that kills its worker every time should not run forever). @default 10
   */
  readonly maxStalledCount?: number;
  /** How often this process looks for stalled jobs of dead workers. @default 15_000 */
  readonly stalledIntervalMs?: number;
  /**
   * Feed the provider's rate-limit headers to the limiter (`observe`), so spend by another
   * client of the same key counts too. @default true
   */
  readonly feedback?: boolean;
  /**
   * Backfill: while the job at the head of the queue waits for budget, jobs behind it that fit
   * now start ahead of it, but only when the head would start no later for them (their spend
   * fits beside it when its room comes) and a slot stays free for it. Fuller use of the budget
   * with a mix of small and large requests; a strict first-come-first-served start order when
   * off. @default false
   */
  readonly backfill?: boolean;
  /**
   * The longest a successful job's result waits for the gate's next reservation, so that
   * storing it also fetches the next job (one BullMQ command instead of two). It never waits
   * while the gate waits for budget. @default 25
   */
  readonly handoffWaitMs?: number;
  readonly logger?: WorkerLogger;
}

export interface WorkerHandle {
  readonly id: string;
  readonly limiter: Limiter;
  readonly breaker: CircuitBreaker;
  /** Calls in flight in this process. */
  inFlight(): number;
  /**
   * Stops pulling, lets the calls in flight finish within `graceMs`, then aborts the rest
   * (their jobs go back to wait) and closes. Safe to call twice.
   */
  stop(graceMs?: number): Promise<void>;
}

interface Running {
  readonly job: Job<JobData, JobResult>;
  readonly token: string;
  reservation: Reservation;
  readonly abort: AbortController;
  readonly done: Promise<void>;
  /** The call has ended and the job only waits to be stored: its slot is free for the gate. */
  ended?: boolean;
}

/** The oldest a peek sent behind the last round's fetches may be to stand for the next round's. */
const AHEAD_PEEK_MAX_AGE_MS = 20;

/** Non-streaming calls above this max_tokens are refused by the SDK without a long timeout. */
const STREAM_ABOVE_MAX_TOKENS = 16_000;

/**
 * BullMQ's worker, opened up for one thing its own run loop does: a job's completion that brings
 * the next job back in the same command (`moveToCompleted` with `fetchNext`) is turned into a
 * job the way `getNextJob` turns one.
 */
class GateWorker extends Worker<JobData, JobResult> {
  async jobFrom(raw: unknown, token: string): Promise<Job<JobData, JobResult> | undefined> {
    if (!Array.isArray(raw) || !raw[0]) return undefined;
    return this.nextJobFromJobData(raw[0], raw[1] as string, token);
  }
}

/**
 * A job whose call succeeded, waiting for the gate to reserve budget for the next job so that its
 * completion fetches that job in the same command. Waits at most `handoffWaitMs`.
 */
interface Carrier {
  readonly r: Running;
  readonly result: JobResult;
  readonly timer: NodeJS.Timeout;
  readonly done: (err?: unknown) => void;
}

const sameScopes = (a: readonly string[], b: readonly string[]) =>
  a.length === b.length && a.every((s, i) => s === b[i]);

/**
 * Starts a worker: a gate that takes budget from the shared limiter before it moves a job to
 * active, the provider call, reconciliation, and the outcome (result, retry, shared pause, dead
 * letter). Any number of these, in any number of processes, behave as one pool.
 */
export async function startWorker(options: WorkerOptions): Promise<WorkerHandle> {
  const id = randomUUID();
  const log = options.logger ?? silent;
  const { redis, names, client } = options;
  if (!client && !options.provider)
    throw new TypeError('startWorker needs a provider client (`client`) or a `provider` function');
  const call: ProviderCaller =
    options.provider ?? ((request, o) => callProvider(client as Anthropic, request, o));
  // Its own connection in subscriber mode: the gate wakes when any process frees budget.
  const subscriber = redis.duplicate();
  subscriber.on('error', () => {});
  const limiter = new Limiter({ redis, names, subscriber, ...options.limiter });
  const breaker = new CircuitBreaker(redis, names, options.breaker);
  const peeker = new HeadPeeker(redis, names);
  // BullMQ defines some 60 scripts on a connection it uses, and ioredis copies them into every
  // MULTI on that connection: the dead letters and the counters get connections of their own.
  const dlqRedis = redis.duplicate();
  const metricsRedis = redis.duplicate();
  for (const c of [dlqRedis, metricsRedis]) c.on('error', () => {});
  const dlq: DeadLetterQueue = openDeadLetterQueue(dlqRedis, names);
  const metrics = new MetricsWriter(metricsRedis, names);
  const localConcurrency = options.concurrency ?? (limiter.concurrency || 10);
  const streamMode = options.stream ?? 'always';
  const lockDurationMs = options.lockDurationMs ?? 30_000;
  const maxReturns = options.maxRateLimitReturns ?? 20;
  const feedback = options.feedback ?? true;
  const handoffWaitMs = options.handoffWaitMs ?? 25;
  const bull = new GateWorker(names.queue, null, {
    connection: redis.duplicate(),
    prefix: bullPrefix(names),
    autorun: false,
    lockDuration: lockDurationMs,
    stalledInterval: options.stalledIntervalMs ?? 15_000,
    maxStalledCount: options.maxStalledCount ?? 10,
  });
  bull.on('error', (err) => log.warn('bullmq error', { error: err.message }));
  // Peeks sent on BullMQ's own connection run after the fetches sent before them: they see the
  // queue as those fetches leave it.
  const peekerBehindFetches = new HeadPeeker(bull.opts.connection as Redis, names);
  await registerQueue(redis, names);
  await limiter.publishConfig();
  await bull.startStalledCheckTimer();

  // One entry a launch: a job fetched again while its earlier entry still finishes is another.
  const running = new Set<Running>();
  let carriers: Carrier[] = [];
  // The slots taken: calls in flight, not the jobs that only wait to be stored.
  const busy = () => {
    let n = 0;
    for (const r of running) if (!r.ended) n++;
    return n;
  };
  const stopper = new AbortController();
  let slotFreed: (() => void) | undefined;
  let trialInFlight = false;
  let tokenCounter = 0;

  // Keep locks and leases alive while calls run; a dead process stops renewing and both lapse.
  const renewEvery = Math.min(lockDurationMs / 3, (options.limiter.leaseMs ?? 30_000) / 3);
  const renewer = setInterval(() => {
    for (const r of running) {
      r.job.extendLock(r.token, lockDurationMs).catch(() => {});
      limiter.renew(r.reservation).catch(() => {});
    }
  }, renewEvery);
  renewer.unref();

  const history = (job: Job<JobData, JobResult>) => [...(job.data.history ?? [])];
  const attemptsUsed = (h: readonly AttemptRecord[]) => h.filter((a) => a.counted).length;

  async function finishFailure(
    r: Running,
    c: Classified,
    startedAt: number,
    latencyMs: number,
    trial: boolean,
    pausedUntil?: number,
  ) {
    const { job, token } = r;
    const h = history(job);
    const record = (outcome: AttemptRecord['outcome'], counted: boolean): AttemptRecord => ({
      at: startedAt,
      outcome,
      counted,
      status: c.status,
      errorClass: c.errorClass,
      message: c.reason,
      latencyMs: Math.round(latencyMs),
    });
    if (c.kind === 'rate_limited') {
      const until = pausedUntil ?? (await limiter.pauseFor(c.retryAfterMs ?? 1_000));
      const returns = (job.data.rateLimitReturns ?? 0) + 1;
      h.push(record('rate_limited', false));
      await metrics.add({ provider_calls: 1, provider_429_retry_after: 1 });
      log.warn('provider rate limit: every worker pauses', {
        job: job.id,
        pausedUntil: new Date(until).toISOString(),
      });
      if (returns > maxReturns) {
        await deadLetter(
          dlq,
          job,
          token,
          { ...c, reason: `rate limited ${returns} times: ${c.reason}` },
          h,
        );
        await metrics.add({ dead_lettered: 1 });
        return;
      }
      await job.updateData({ ...job.data, history: h, rateLimitReturns: returns });
      await job.moveToWait(token);
      return;
    }
    if (c.kind === 'final') {
      h.push(record('final', true));
      await metrics.add(
        c.status === 429
          ? { provider_calls: 1, provider_429_final: 1, dead_lettered: 1 }
          : { provider_calls: 1, provider_4xx: 1, dead_lettered: 1 },
      );
      log.warn('dead-lettered', { job: job.id, reason: c.reason });
      await deadLetter(dlq, job, token, c, h);
      return;
    }
    // Retryable: count toward the breaker; an attempt is spent only while the provider looked
    // healthy (the breaker closed before and after this failure), so an outage sends no job to
    // the dead letters, not even one whose call was under way when the breaker opened.
    const { opened, whileClosed } = await breaker.recordFailure();
    if (opened)
      log.warn('circuit breaker opened: calls stop until the cool-down ends', { job: job.id });
    await metrics.add(
      c.status === undefined
        ? { provider_calls: 1, provider_connection_errors: 1 }
        : { provider_calls: 1, provider_5xx: 1 },
    );
    const counts = whileClosed && !trial;
    h.push(record('retryable', counts));
    const used = attemptsUsed(h);
    const allowed = job.opts.attempts ?? 5;
    if (counts && used >= allowed) {
      await deadLetter(
        dlq,
        job,
        token,
        {
          ...c,
          reason: `gave up after ${used} attempt${used === 1 ? '' : 's'}: ${c.reason}`,
          errorClass: c.errorClass,
        },
        h,
      );
      await metrics.add({ dead_lettered: 1 });
      log.warn('dead-lettered', { job: job.id, reason: c.reason, attempts: used });
      return;
    }
    const delay = counts ? fullJitterBackoff(used, options.backoff) : 0;
    await metrics.add({ retries: 1 });
    await job.updateData({ ...job.data, history: h });
    await job.moveToDelayed(Date.now() + delay, token);
  }

  async function execute(r: Running, trial: boolean) {
    const { job, token } = r;
    const data = job.data;
    const startedAt = Date.now();
    const t0 = performance.now();
    let begun = false;
    // The stamp once the response has begun, and the provider's reading after it, if any.
    let stamped: Promise<void> | undefined;
    let reading: Promise<void> | undefined;
    const stream =
      streamMode === 'always' ||
      data.stream === true ||
      data.request.max_tokens > STREAM_ABOVE_MAX_TOKENS;
    let res: ProviderCallResult;
    try {
      res = await call(data.request, {
        stream,
        timeoutMs: data.timeoutMs ?? options.timeoutMs ?? 600_000,
        signal: r.abort.signal,
        onStart: async (headers) => {
          begun = true;
          // Not stamped now means stamped later, at settle or at the lease's end: never too early.
          // The response is read meanwhile. The provider's reading goes once the stamp is
          // answered, so that the calls which began in the same moment (their stamps share its
          // command) also count as ours when it is read; and before this call's settle, whose
          // refund the reading (taken at admission) does not know of.
          const figures = feedback ? readRateLimitHeaders(headers) : {};
          const hasReading = Object.keys(figures).length > 0;
          // Without a reading to follow, the stamp may wait for others, or for this call's settle.
          stamped = limiter.start(r.reservation, { lazy: !hasReading }).catch((err) =>
            log.warn('could not stamp the reservation', {
              job: job.id,
              error: (err as Error).message,
            }),
          );
          if (hasReading) {
            reading = stamped.then(() =>
              limiter.observeReading(figures, GLOBAL_SCOPE, r.reservation).catch(() => {}),
            );
          }
        },
      });
    } catch (err) {
      const latencyMs = performance.now() - t0;
      // The reading, if any, goes first; a stamp not sent yet is taken back by the end below.
      await reading;
      if (r.abort.signal.aborted) {
        // Shutdown past its grace period: the call may have reached the provider.
        await (begun ? limiter.keep(r.reservation) : limiter.release(r.reservation)).catch(
          () => {},
        );
        await job.moveToWait(token).catch(() => {});
        return;
      }
      const c = classifyProviderError(err);
      const headers = (err as { headers?: unknown }).headers;
      // A 429's pause goes first: every worker stops before this call's slot and budget come
      // back (which wakes the waiters), and before its reading ends a probe's wait.
      const pausedUntil =
        c.kind === 'rate_limited'
          ? await limiter.pauseFor(c.retryAfterMs ?? 1_000).catch(() => undefined)
          : undefined;
      await (c.maybeCharged ? limiter.keep(r.reservation) : limiter.release(r.reservation));
      if (headers && feedback) {
        await limiter.observe(headers as never, GLOBAL_SCOPE, r.reservation).catch(() => {});
      }
      await finishFailure(r, c, startedAt, latencyMs, trial, pausedUntil);
      return;
    }
    // The call succeeded and was paid for. The budget goes back now, after the provider's
    // reading (settling is batched, and the gate's next reservation is sent after it); the
    // result is stored by the job's completion, which brings the next job along when the gate
    // has reserved for one. A failure in the bookkeeping (the limiter fails fast while Redis
    // reconnects) must not turn a successful call into a retry that calls, and pays, again.
    const usage = res.message.usage;
    await reading;
    const h = history(job);
    h.push({ at: startedAt, outcome: 'ok', counted: true, latencyMs: Math.round(res.latencyMs) });
    const result: JobResult = {
      message: res.message,
      latencyMs: Math.round(res.latencyMs),
      requestId: res.requestId,
      attempts: attemptsUsed(h),
      completedAt: Date.now(),
    };
    const bookkeeping = Promise.allSettled([
      stamped,
      // Unsettled, the reservation keeps its estimate until its lease ends: safe, not exact.
      limiter
        .settle(r.reservation, {
          inputTokens: usage.input_tokens + (usage.cache_creation_input_tokens ?? 0),
          outputTokens: usage.output_tokens,
        })
        .catch(async (err: unknown) => {
          // Usage the limiter cannot count (not whole tokens): the estimate stays charged, and
          // the slot comes back now rather than when the lease ends.
          if (err instanceof TypeError) await limiter.keep(r.reservation).catch(() => {});
          throw err;
        }),
      breaker.success(),
      metrics.latency(res.latencyMs, {
        provider_calls: 1,
        provider_ok: 1,
        completed: 1,
        tokens_in: usage.input_tokens,
        tokens_out: usage.output_tokens,
      }),
    ]);
    try {
      await complete(r, result);
    } finally {
      for (const a of await bookkeeping) {
        if (a.status === 'rejected')
          log.warn('bookkeeping after a successful call failed', {
            job: job.id,
            error: (a.reason as Error).message,
          });
      }
    }
  }

  /**
   * Stores a successful job's result. While the gate is running, the job waits (`handoffWaitMs`
   * at most, and not while the gate waits for budget) for the gate's next reservation, and its
   * completion fetches the job that reservation is for in the same command; its slot counts as
   * free meanwhile.
   */
  function complete(r: Running, result: JobResult): Promise<void> {
    if (stopper.signal.aborted) return r.job.moveToCompleted(result, r.token, false).then(() => {});
    return new Promise<void>((resolve, reject) => {
      r.ended = true;
      const carrier: Carrier = {
        r,
        result,
        timer: setTimeout(() => completeAlone([carrier]), handoffWaitMs),
        done: (err) => {
          if (err === undefined) resolve();
          else reject(err);
        },
      };
      carriers.push(carrier);
      slotFreed?.();
    });
  }

  /** Takes up to `n` waiting completions for the gate to fetch with. */
  function claimCarriers(n: number): Carrier[] {
    const claimed = carriers.slice(0, n);
    carriers = carriers.slice(claimed.length);
    for (const c of claimed) clearTimeout(c.timer);
    return claimed;
  }

  /** Completes jobs without fetching: the gate will not reserve for their slots soon. */
  function completeAlone(which: readonly Carrier[] = carriers): void {
    if (which.length === 0) return;
    const set = new Set(which);
    carriers = carriers.filter((c) => !set.has(c));
    for (const c of which) {
      clearTimeout(c.timer);
      c.r.job.moveToCompleted(c.result, c.r.token, false).then(
        () => c.done(),
        (err: unknown) => c.done(err),
      );
    }
  }

  /**
   * Completes a waiting job and fetches the next one in the same command, locked with the same
   * token. Resolves with the job fetched, if any; a failed completion is the carrier's own error
   * (its job is recovered as stalled), not the gate's.
   */
  async function fetchVia(c: Carrier): Promise<Job<JobData, JobResult> | undefined> {
    let raw: unknown;
    try {
      raw = await c.r.job.moveToCompleted(c.result, c.r.token, true);
    } catch (err) {
      c.done(err);
      return undefined;
    }
    c.done();
    return bull.jobFrom(raw, c.r.token);
  }

  function launch(
    job: Job<JobData, JobResult>,
    token: string,
    reservation: Reservation,
    trial: boolean,
  ) {
    const abort = new AbortController();
    const entry = { job, token, reservation, abort } as Running;
    if (trial) trialInFlight = true;
    (entry as { done: Promise<void> }).done = execute(entry, trial)
      .catch((err) =>
        log.warn('job handling failed; BullMQ will recover it as stalled', {
          job: job.id,
          error: (err as Error).message,
        }),
      )
      .finally(() => {
        running.delete(entry);
        if (trial) trialInFlight = false;
        slotFreed?.();
      });
    running.add(entry);
  }

  async function waitForSlot() {
    while (busy() >= localConcurrency && !stopper.signal.aborted) {
      await new Promise<void>((resolve) => {
        // One listener at a time: the pool waits here every time it is full, for as long as
        // the process lives.
        const wake = () => {
          stopper.signal.removeEventListener('abort', wake);
          slotFreed = undefined;
          resolve();
        };
        slotFreed = wake;
        stopper.signal.addEventListener('abort', wake, { once: true });
      });
    }
  }

  /**
   * Moves a job that only its own scope's budget holds back to the delayed set until that budget
   * frees (no attempt spent), so the jobs behind it go ahead. It is active for that one move only.
   */
  async function deferHeldJob(held: { jobId: string; waitMs: number }): Promise<void> {
    const token = `${id}:${++tokenCounter}`;
    const job = await bull.getNextJob(token, { block: false });
    if (!job) return;
    if (job.id !== held.jobId) {
      await job.moveToWait(token);
      return;
    }
    // The wait is an upper bound while the scope's calls are in flight (they free their budget
    // when they settle, not at a known time): look again within a second.
    await job.moveToDelayed(Date.now() + Math.min(Math.max(held.waitMs, 10), 1_000), token);
    await metrics.add({ deferred_by_scope: 1 });
  }

  /** Takes the jobs whose reservations went ahead of the waiting head (backfill). */
  async function takeAhead(rs: Reservation[], ahead: HeadJob[]): Promise<void> {
    let take: number[];
    try {
      const moved = new Set(await peeker.moveToFront(ahead.map((h) => h.id)));
      take = ahead.flatMap((h, i) => (moved.has(h.id) ? [i] : []));
    } catch (err) {
      await Promise.all(rs.map((r) => limiter.release(r).catch(() => {})));
      throw err;
    }
    // Reservations for jobs no longer waiting (another worker took them) go back.
    await Promise.all(rs.filter((_, i) => !take.includes(i)).map((r) => limiter.release(r)));
    await takeJobs(
      take.map((i) => ahead[i]!),
      take.map((i) => rs[i]!),
      false,
      false,
    );
    metrics.add({ backfilled: take.length }).catch(() => {});
  }

  async function gateOnce(): Promise<void> {
    await waitForSlot();
    if (stopper.signal.aborted) return;
    const b = await breaker.check();
    // Not now, or a trial call, which goes alone: the jobs waiting to be stored do not wait.
    if (!b.allowed || b.trial) completeAlone();
    if (!b.allowed || (b.trial && trialInFlight)) {
      await sleep(b.allowed ? 50 : Math.min(b.waitMs, 1_000), undefined, {
        signal: stopper.signal,
      });
      return;
    }
    // Every free slot at once: the jobs queued behind the head, charged to the same scopes, are
    // reserved in the head's round trip and fetched together. A trial call goes alone.
    const room = () => (b.trial ? 1 : Math.max(1, localConcurrency - busy()));
    roundsFollowClosely = performance.now() - lastTakeAt < AHEAD_PEEK_MAX_AGE_MS;
    const heads = (await nextPeek(room())) ?? (await peeker.peekMany(room()));
    let head = heads[0];
    if (!head) {
      completeAlone();
      // Idle: nothing acquires, so nothing prunes; keep the limiter's keys to one window's worth.
      if (Date.now() - lastPrune > 1_000) {
        lastPrune = Date.now();
        await limiter.prune();
      }
      await sleep(idleMs, undefined, { signal: stopper.signal });
      idleMs = Math.min(idleMs * 2, 200);
      return;
    }
    idleMs = 5;
    let behind = followers(heads);
    // Backfill goes by the slots free now, keeping one for the head.
    const backfillRoom = () => (options.backfill && !b.trial ? room() - 1 : 0);
    // The gate's place in the limiter's line: attempt, take what went ahead, step around a job
    // held by its own scope, sleep, look at the queue again.
    const line = limiter.line(head.cost, {
      scopes: head.scopes,
      priority: head.priority,
      more: behind.map((h) => h.cost),
      backfill: backfillRoom(),
    });
    let reservations: Reservation[];
    try {
      for (;;) {
        stopper.signal.throwIfAborted();
        const a = await line.attempt();
        if (a.ok) {
          reservations = a.reservations;
          break;
        }
        if (a.ahead.length > 0)
          await takeAhead(
            [...a.ahead],
            a.aheadIndexes.map((i) => behind[i]!),
          );
        // Waiting for budget: the jobs waiting to be stored do not wait with the gate.
        completeAlone();
        const d = a.denial;
        // A job held back by its own tenant's (or team's) budget must not hold back everyone
        // behind it: BullMQ would hand it out first all the same. Step around it instead.
        if (d.reason === 'budget' && d.scope && d.scope !== GLOBAL_SCOPE) {
          await line.leave().catch(() => {});
          await deferHeldJob({ jobId: head.id, waitMs: d.waitMs });
          return;
        }
        await line.sleep(a, stopper.signal);
        // Look again: the head may have changed (a more urgent job), and so may the jobs
        // behind it (some went ahead) and the slots free for them (a trial still goes alone).
        const now = await peeker.peekMany(room());
        if (!now[0]) {
          // Nothing to see (paused, or another worker took the head): no jobs behind either,
          // rather than the ones seen before, which may have started since.
          behind = [];
          line.update({ more: [], backfill: 0 });
          continue;
        }
        head = now[0];
        behind = followers(now);
        line.update({
          cost: head.cost,
          priority: head.priority,
          scopes: head.scopes,
          more: behind.map((h) => h.cost),
          backfill: backfillRoom(),
        });
      }
    } catch (err) {
      await line.leave().catch(() => {});
      completeAlone();
      if (stopper.signal.aborted) throw stopper.signal.reason;
      if (!(err instanceof CostExceedsLimitError)) throw err;
      // The head job can never fit (the limits shrank after it was enqueued): dead-letter it.
      const job = await bull.getNextJob(`${id}:${++tokenCounter}`, { block: false });
      if (job) {
        const token = `${id}:${tokenCounter}`;
        if (job.id === head.id) {
          await deadLetter(
            dlq,
            job,
            token,
            { reason: err.message, errorClass: 'CostExceedsLimitError' },
            history(job),
          );
          await metrics.add({ dead_lettered: 1 });
        } else {
          await job.moveToWait(token);
        }
      }
      return;
    }
    await takeJobs([head, ...behind.slice(0, reservations.length - 1)], reservations, b.trial);
  }

  /**
   * The peek sent behind the last round's fetches, while it is fresh: the next round's peek
   * without a round trip of its own. Once only; undefined when there is none to use.
   */
  let aheadPeek:
    | { readonly sentAt: number; readonly heads: Promise<HeadJob[] | undefined> }
    | undefined;
  async function nextPeek(n: number): Promise<HeadJob[] | undefined> {
    const ahead = aheadPeek;
    aheadPeek = undefined;
    if (!ahead || performance.now() - ahead.sentAt > AHEAD_PEEK_MAX_AGE_MS) return undefined;
    const heads = await ahead.heads;
    // Empty is no answer: the queue may have filled since; look again.
    if (!heads?.length) return undefined;
    return heads.slice(0, n);
  }

  /** The jobs behind the head that may share its round trip: those charged to its scopes. */
  function followers(heads: readonly HeadJob[]): HeadJob[] {
    const [first, ...rest] = heads;
    const out: HeadJob[] = [];
    for (const h of rest) {
      if (!first || !sameScopes(h.scopes, first.scopes)) break;
      out.push(h);
    }
    return out;
  }

  /**
   * Moves as many jobs to active as there are reservations and starts them. A job arrives with
   * the reservation made for it; one that another worker's take put in its place uses a spare
   * reservation that covers it (same scopes, no larger), else goes back to wait. What is left
   * unused is released.
   */
  async function takeJobs(
    wanted: readonly HeadJob[],
    reservations: readonly Reservation[],
    trial: boolean,
    pauseWhenNone = true,
  ): Promise<void> {
    const spare = new Map<string, { head: HeadJob; reservation: Reservation }>();
    wanted.forEach((h, i) => {
      spare.set(h.id, { head: h, reservation: reservations[i]! });
    });
    // Jobs waiting to be stored fetch first, each in its own completion's command.
    const via = claimCarriers(wanted.length);
    const tokens = wanted.map((_, i) => via[i]?.r.token ?? `${id}:${++tokenCounter}`);
    let failure: unknown;
    const fetched: { job: Job<JobData, JobResult>; token: string }[] = [];
    // Each fetched job is launched, dead-lettered or put back; each reservation is used or
    // released, whatever fails on the way (a job left active would wait for the stalled check).
    const handled = new Set<Job<JobData, JobResult>>();
    const arrivals = tokens.map((t, i) =>
      (via[i]
        ? fetchVia(via[i])
        : (bull.getNextJob(t, { block: false }) as Promise<Job<JobData, JobResult> | undefined>)
      )
        .then((job) => {
          if (!job) return;
          fetched.push({ job, token: t });
          // A job that comes with the reservation made for it starts at once, its call under
          // way while Redis still answers the other fetches.
          const mine = job.deferredFailure ? undefined : spare.get(job.id!);
          if (!mine) return;
          launch(job, t, mine.reservation, trial);
          spare.delete(job.id!);
          handled.add(job);
        })
        .catch((err: unknown) => {
          failure ??= err;
        }),
    );
    // When rounds follow each other closely, the next round's peek goes behind the fetches (in
    // the next turn: BullMQ writes a command a few promise steps after it is asked for).
    if (roundsFollowClosely && !stopper.signal.aborted) {
      aheadPeek = {
        sentAt: performance.now(),
        heads: new Promise<void>((r) => setImmediate(r)).then(() =>
          peekerBehindFetches.peekMany(localConcurrency).catch(() => undefined),
        ),
      };
    }
    await Promise.all(arrivals);
    lastTakeAt = performance.now();
    try {
      // What is left: jobs another worker's take put in place of ours, and jobs to fail.
      const strangers = fetched.filter(({ job }) => !handled.has(job));
      strangers.sort((a, b) => Number(!!b.job.deferredFailure) - Number(!!a.job.deferredFailure));
      for (const { job, token } of strangers) {
        if (job.deferredFailure) {
          // BullMQ's stalled check gave this job up (its workers died with it more than
          // maxStalledCount times) and left the failing to whoever takes it next.
          await deadLetter(
            dlq,
            job,
            token,
            {
              reason: `its worker died with it too many times (${job.deferredFailure})`,
              errorClass: 'StalledJobError',
            },
            history(job),
          );
          handled.add(job);
          metrics.add({ dead_lettered: 1 }).catch(() => {});
          log.warn('dead-lettered', { job: job.id, reason: job.deferredFailure });
          continue;
        }
        const c = job.data.cost;
        const fit = [...spare.values()].find(
          ({ head, reservation }) =>
            c.inputTokens <= reservation.cost.inputTokens &&
            c.outputTokens <= reservation.cost.outputTokens &&
            sameScopes(job.data.scopes ?? [], head.scopes),
        );
        if (!fit) {
          // Another worker took a job we reserved for and this one needs more: it goes back.
          await job.moveToWait(token);
          handled.add(job);
          continue;
        }
        // Used or not, this reservation is not spare any more: released here if adjust fails.
        spare.delete(fit.head.id);
        const adjusted = await limiter.adjust(fit.reservation, c).catch(async (err: unknown) => {
          await limiter.release(fit.reservation).catch(() => {});
          throw err;
        });
        handled.add(job);
        launch(job, token, adjusted, trial);
      }
    } finally {
      await Promise.all([
        ...[...spare.values()].map(({ reservation }) =>
          limiter.release(reservation).catch(() => {}),
        ),
        ...fetched
          .filter(({ job }) => !handled.has(job))
          .map(({ job, token }) => job.moveToWait(token).catch(() => {})),
      ]);
    }
    if (failure) throw failure;
    if (fetched.length === 0) completeAlone();
    if (fetched.length === 0 && pauseWhenNone) {
      // Another worker took them, or BullMQ holds the queue: look again a little later rather
      // than reserving and releasing in a tight loop.
      await sleep(idleMs, undefined, { signal: stopper.signal });
      idleMs = Math.min(idleMs * 2, 200);
    }
  }

  let idleMs = 5;
  let lastPrune = 0;
  // When the last round had fetched its jobs, and whether this one began soon after.
  let lastTakeAt = Number.NEGATIVE_INFINITY;
  let roundsFollowClosely = false;
  const loop = (async () => {
    while (!stopper.signal.aborted) {
      try {
        await gateOnce();
      } catch (err) {
        completeAlone();
        if (stopper.signal.aborted) break;
        const msg =
          err instanceof LimiterUnavailableError
            ? err.message
            : `gate failed: ${(err as Error).message}`;
        log.warn(msg);
        await sleep(500, undefined, { signal: stopper.signal }).catch(() => {});
      }
    }
  })();

  let stopping: Promise<void> | undefined;
  const handle: WorkerHandle = {
    id,
    limiter,
    breaker,
    inFlight: busy,
    stop(graceMs = 30_000) {
      stopping ??= (async () => {
        stopper.abort();
        await loop;
        completeAlone();
        const all = Promise.all([...running].map((r) => r.done));
        const timer = setTimeout(() => {
          for (const r of running) r.abort.abort();
        }, graceMs);
        await all;
        clearTimeout(timer);
        clearInterval(renewer);
        await bull.close();
        await dlq.close();
        for (const c of [dlqRedis, metricsRedis]) await c.quit().catch(() => c.disconnect());
        await (bull.opts.connection as Redis).quit().catch(() => {});
        await breaker.abandonTrial().catch(() => {});
        await limiter.close();
        await subscriber.quit().catch(() => subscriber.disconnect());
      })();
      return stopping;
    },
  };
  log.info('worker started', {
    id,
    queue: names.queue,
    concurrency: localConcurrency,
    stream: streamMode,
  });
  return handle;
}
