import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type Anthropic from '@anthropic-ai/sdk';
import type { Job } from 'bullmq';
import { BudgetLedger } from '../shared/budgets.ts';
import { describeDeployment } from '../shared/deployments.ts';
import { LimiterUnavailableError } from '../shared/errors.ts';
import { EstimateLearning } from '../shared/estimate-learning.ts';
import { DEFAULT_RETRY_FOR_MS, type JobData, type JobResult } from '../shared/job.ts';
import { FleetLayout } from '../shared/layout.ts';
import { Limiter } from '../shared/limiter/limiter.ts';
import type { Reservation } from '../shared/limiter/types.ts';
import { MetricsWriter } from '../shared/metrics.ts';
import { PageCosts } from '../shared/page-costs.ts';
import { type DeadLetterQueue, openDeadLetterQueue, registerQueue } from '../shared/queues.ts';
import { duplicateRedis, type RedisClient } from '../shared/redis.ts';
import { errorEventLog } from '../shared/telemetry/throttled-warning.ts';
import { WorkerPresence } from '../shared/worker-presence.ts';
import { CircuitBreaker } from './breaker.ts';
import {
  assertBullmqVersion,
  type GateWorker,
  HeadPeeker,
  openGateWorker,
} from './bullmq-internals.ts';
import { type CallParts, type Running, runCall } from './call.ts';
import { logConnectionChanges } from './connection-log.ts';
import { CostCheck } from './cost-check.ts';
import { FairShare } from './fair-share.ts';
import { Gate } from './gate.ts';
import { gatePaths } from './gate-paths.ts';
import { GateWaits } from './gate-waits.ts';
import { Handoff } from './handoff.ts';
import { JobHistory } from './job-history.ts';
import { LearnedCosts } from './learned-costs.ts';
import { silentLogger, type WorkerLogger } from './logger.ts';
import { LoopProgress } from './loop-progress.ts';
import { MarkerWait } from './marker-wait.ts';
import { Outcomes } from './outcome.ts';
import { type Deployment, DeploymentPool, slotsOf } from './pool.ts';
import { PromptCaches } from './prompt-caches.ts';
import { callProvider } from './provider.ts';
import { SlotWait } from './slot-wait.ts';
import { StreamEventPublisher } from './stream-events.ts';
import { checkWorkerOptions, type WorkerHandle, type WorkerOptions } from './worker-options.ts';

export type { WorkerLogger } from './logger.ts';
export type { WorkerHandle, WorkerOptions } from './worker-options.ts';

/** The parts a worker's calls and its gate share. */
interface WorkerParts {
  readonly limiter: Limiter;
  readonly breaker: CircuitBreaker;
  readonly metrics: MetricsWriter;
  readonly handoff: Handoff;
  readonly outcomes: Outcomes;
  readonly ledger: BudgetLedger | undefined;
  readonly costs: LearnedCosts;
  readonly caches: PromptCaches;
  readonly pool: DeploymentPool | undefined;
}

/** What the worker reserves for a job's input: what it learned of the provider's counting, or the estimate. */
function learnedCosts(options: WorkerOptions): LearnedCosts {
  const learn = options.learnEstimates ?? true;
  const { redis, names } = options;
  if (learn === false) return new LearnedCosts(undefined);
  return new LearnedCosts(
    new EstimateLearning({ redis, names, ...(learn === true ? {} : learn) }),
    new PageCosts({ redis, names }),
  );
}

/**
 * A worker: a gate that takes budget from the shared limiter before it moves a job to active,
 * the provider call, and the outcome (result, retry, shared pause, dead letter). Any number of
 * these, in any number of processes, behave as one pool.
 */
export class Worker implements WorkerHandle {
  readonly id = randomUUID();
  readonly limiter: Limiter;
  readonly breaker: CircuitBreaker;
  private readonly log: WorkerLogger;
  private readonly concurrency: number;
  private readonly lockDurationMs: number;
  /** Where the queue is registered (again after Redis comes back). */
  private readonly registerOn: Pick<WorkerOptions, 'redis' | 'names'>;
  private readonly subscriber: RedisClient;
  /** Connections of their own: ioredis copies BullMQ's 60 scripts into every MULTI on its. */
  private readonly dlqRedis: RedisClient;
  private readonly metricsRedis: RedisClient;
  private readonly dlq: DeadLetterQueue;
  private readonly bull: GateWorker;
  private readonly handoff: Handoff;
  private readonly gate: Gate;
  private readonly idleWait: MarkerWait;
  private readonly callParts: CallParts;
  private readonly waits = new GateWaits();
  /** The gate's paths beyond the plain ones (all unless a bench switch says: gate-paths.ts). */
  private readonly gatePaths = gatePaths();
  private readonly running = new Set<Running>();
  private readonly stopper = new AbortController();
  private readonly slots = new SlotWait({
    concurrency: () => this.concurrency,
    busy: () => this.inFlight(),
    stopped: this.stopper.signal,
  });
  /** The breaker trials under way here: '' for the queue's, else by deployment. */
  private readonly trials = new Set<string>();
  private readonly pool: DeploymentPool | undefined;
  private tokenCounter = 0;
  private readonly progress = new LoopProgress();
  private renewer: NodeJS.Timeout | undefined;
  private unwatchRedis: (() => void) | undefined;
  private loop: Promise<void> = Promise.resolve();
  private stopping: Promise<void> | undefined;
  private presence: WorkerPresence | undefined;
  private layout: FleetLayout | undefined;

  /** Starts a worker; see {@link WorkerOptions}. */
  static async start(options: WorkerOptions): Promise<Worker> {
    assertBullmqVersion();
    checkWorkerOptions(options);
    const worker = new Worker(options);
    try {
      await worker.open(options);
    } catch (err) {
      await worker.stop(0).catch(() => {});
      throw err;
    }
    return worker;
  }

  private constructor(options: WorkerOptions) {
    const { redis, names } = options;
    const log = options.logger ?? silentLogger;
    this.log = log;
    this.concurrency = options.concurrency ?? 10;
    this.lockDurationMs = options.lockDurationMs ?? 30_000;
    this.registerOn = { redis, names };
    // Its own connection in subscriber mode: the gate wakes when any process frees budget.
    this.subscriber = duplicateRedis(redis, { shardedSubscribers: true });
    this.subscriber.on('error', () => {});
    const pool = options.deployments?.length
      ? new DeploymentPool(redis, names, options.deployments, options.breaker)
      : undefined;
    this.pool = pool;
    const limiter = new Limiter({
      redis,
      names,
      subscriber: this.subscriber,
      ...options.limiter,
      // Each deployment of a pool is a scope with its limits (and its readings, its pause).
      ...(pool ? { scopes: { ...options.limiter.scopes, ...pool.scopeLimits() } } : {}),
      ...(pool ? { scopeSlots: pool.scopeSlots(options.maxInFlight ?? 0) } : {}),
      concurrency: options.maxInFlight ?? 0,
    });
    this.limiter = limiter;
    const breaker = new CircuitBreaker(redis, names, options.breaker);
    this.breaker = breaker;
    this.dlqRedis = duplicateRedis(redis);
    this.metricsRedis = duplicateRedis(redis);
    for (const c of [this.dlqRedis, this.metricsRedis]) c.on('error', () => {});
    this.dlq = openDeadLetterQueue(this.dlqRedis, names);
    const metrics = new MetricsWriter(this.metricsRedis, names);
    const history = new JobHistory(this.metricsRedis, names, { enabled: options.jobLogs ?? true });
    const bull = openGateWorker(
      redis,
      names,
      {
        lockDuration: this.lockDurationMs,
        stalledInterval: options.stalledIntervalMs ?? 15_000,
        maxStalledCount: options.maxStalledCount ?? 10,
      },
      options.resultBounds,
    );
    bull.on('error', errorEventLog(log, 'bullmq error'));
    this.bull = bull;
    const signal = this.stopper.signal;
    // A gate that fetches nothing along (a bench switch) fetches no job with a completion
    // either: results are stored at once. So with fair share: its fetches go with the acquire,
    // behind the admitted jobs' move to the front (fetch-along.ts), where no other worker's
    // fetch comes between; a completion's fetch would take whatever is in front.
    const withCompletions = this.gatePaths.fetchesAlong && !options.fairShare;
    const handoff = new Handoff(
      bull,
      withCompletions ? (options.handoffWaitMs ?? 25) : 0,
      () => this.slots.freed(),
      signal,
    );
    this.handoff = handoff;
    const outcomes = new Outcomes({
      dlq: this.dlq,
      metrics,
      limiter,
      breaker,
      log,
      history,
      maxRateLimitReturns: options.maxRateLimitReturns ?? 20,
      retryForMs: options.retryForMs ?? DEFAULT_RETRY_FOR_MS,
      deadLetterBounds: options.deadLetterBounds,
      backoff: options.backoff,
    });
    const ledger = options.budgets && new BudgetLedger(redis, names, options.budgets);
    const costs = learnedCosts(options);
    const caches = new PromptCaches(redis, names);
    const parts: WorkerParts = {
      limiter,
      breaker,
      metrics,
      handoff,
      outcomes,
      ledger,
      costs,
      caches,
      pool,
    };
    this.callParts = this.callPartsOf(options, { ...parts, history });
    this.idleWait = new MarkerWait(redis, names);
    this.gate = this.gateOf(options, { ...parts, bull });
  }

  /** What each call needs: the provider, the shared budget, the breaker, and where results go. */
  private callPartsOf(
    options: WorkerOptions,
    p: WorkerParts & { readonly history: JobHistory },
  ): CallParts {
    const client = options.client;
    return {
      ...p,
      call: options.provider ?? ((request, o) => callProvider(client as Anthropic, request, o)),
      log: this.log,
      stopped: this.stopper.signal,
      shareRoom: (d) => this.shareRoom(d),
      ownsToken: (token) => token.startsWith(`${this.id}:`),
      stream: options.stream ?? 'always',
      timeoutMs: options.timeoutMs ?? 600_000,
      timeouts: { firstByteMs: options.firstByteTimeoutMs, idleMs: options.idleTimeoutMs },
      feedback: options.feedback ?? true,
      events: new StreamEventPublisher(this.metricsRedis, options.names),
    };
  }

  /** The gate: it takes budget for the jobs at the head of the queue before they start. */
  private gateOf(options: WorkerOptions, p: WorkerParts & { readonly bull: GateWorker }): Gate {
    const { redis, names } = options;
    return new Gate({
      ...p,
      log: this.log,
      peeker: new HeadPeeker(redis, names),
      // Peeks sent on BullMQ's own connection run after the fetches sent before them: they see
      // the queue as those fetches leave it.
      peekerBehindFetches: new HeadPeeker(p.bull.opts.connection as RedisClient, names),
      idleWait: this.idleWait,
      idleCheckMs: options.idleCheckMs ?? 1_000,
      paths: this.gatePaths,
      fair: options.fairShare ? new FairShare(redis, names, options.fairShare) : undefined,
      stopped: this.stopper.signal,
      waits: this.waits,
      nextToken: () => `${this.id}:${++this.tokenCounter}`,
      launch: (job, token, reservation, trial) => this.launch(job, token, reservation, trial),
      check: new CostCheck(redis, names, p.costs, this.log, options.limiter.scopes),
      slots: {
        concurrency: this.concurrency,
        busy: () => this.inFlight(),
        trialInFlight: (deployment) => this.trials.has(deployment ?? ''),
        shareRoom: (d) => this.shareRoom(d),
        // Waiting for a slot is no step of the loop: the calls holding them end on their own.
        waitForSlot: () => this.progress.rest(() => this.slots.wait()),
      },
    });
  }

  private async open(options: WorkerOptions): Promise<void> {
    // First: a worker of another build (scripts, keys) must not run beside live ones.
    this.layout = await FleetLayout.claim({ ...this.registerOn, workerId: this.id });
    // A failover shows in the log: the connection lost, and where it came back.
    this.unwatchRedis = logConnectionChanges(options.redis, this.log);
    await registerQueue(options.redis, options.names);
    await this.limiter.publishConfig();
    // Marked running, so a gateway can tell a caller no worker runs.
    this.presence = new WorkerPresence(options.redis, options.names, this.id);
    await this.presence.start();
    await this.bull.startStalledCheckTimer();
    // Keep locks and leases alive while calls run; a dead process stops renewing and both lapse.
    const lockMs = this.lockDurationMs;
    const renewEvery = Math.min(lockMs / 3, (options.limiter.leaseMs ?? 30_000) / 3);
    this.renewer = setInterval(() => {
      for (const r of this.running) {
        r.job.extendLock(r.token, lockMs).catch(() => {});
        this.limiter.renew(r.reservation).catch(() => {});
      }
    }, renewEvery);
    this.renewer.unref();
    this.loop = this.run();
    this.log.info('worker started', {
      id: this.id,
      queue: options.names.queue,
      concurrency: this.concurrency,
      maxInFlight: options.maxInFlight ?? null,
      stream: this.callParts.stream,
      // A pool's deployments, best first: each call's line names the one that took it.
      deployments: this.pool?.list.map((d) => describeDeployment(d.config)),
    });
  }

  /** Calls in flight in this process: the slots taken, not the jobs that only wait to be stored. */
  inFlight(): number {
    let n = 0;
    for (const r of this.running) if (!r.ended) n++;
    return n;
  }

  /**
   * How many more calls this process may start on a deployment of its pool before its calls
   * waiting for their first answer hold its share of the slots (pool.ts, `slotsOf`).
   */
  private shareRoom(d: Deployment): number {
    let waiting = 0;
    for (const r of this.running)
      if (!r.ended && !r.answered && this.pool?.of(r.reservation) === d) waiting++;
    return slotsOf(d, this.concurrency) - waiting;
  }

  /** Gate rounds until the worker stops; a failed round is logged and retried after a pause. */
  private async run(): Promise<void> {
    const signal = this.stopper.signal;
    let failedSince: number | undefined;
    while (!signal.aborted) {
      try {
        this.progress.round();
        await this.gate.round();
        if (failedSince !== undefined) {
          this.log.info('Redis answers again; the worker carries on', {
            afterMs: Date.now() - failedSince,
          });
          failedSince = undefined;
          // A failover may have lost the registration with writes not yet replicated.
          registerQueue(this.registerOn.redis, this.registerOn.names).catch(() => {});
        }
      } catch (err) {
        this.handoff.completeAlone();
        if (signal.aborted) break;
        failedSince ??= Date.now();
        const msg =
          err instanceof LimiterUnavailableError
            ? err.message
            : `gate failed: ${(err as Error).message}`;
        this.log.warn(msg);
        await sleep(500, undefined, { signal }).catch(() => {});
      }
    }
  }

  private launch(
    job: Job<JobData, JobResult>,
    token: string,
    reservation: Reservation,
    trial: boolean,
  ): void {
    const abort = new AbortController();
    const waits = this.waits.take(job.id!);
    if (this.takenAgain(job, token, reservation, trial)) return;
    const entry = { job, token, reservation, abort, waits } as Running;
    this.progress.called();
    const trialOf = this.pool?.of(reservation)?.name ?? '';
    if (trial) this.trials.add(trialOf);
    (entry as { done: Promise<void> }).done = runCall(this.callParts, entry, trial)
      .catch((err) =>
        this.log.warn('job handling failed; BullMQ will recover it as stalled', {
          job: job.id,
          error: (err as Error).message,
        }),
      )
      .finally(() => {
        this.running.delete(entry);
        if (trial) this.trials.delete(trialOf);
        this.slots.freed();
      });
    this.running.add(entry);
  }

  /**
   * A job fetched again while its call still runs here: its lock lapsed (the process was stopped
   * or its event loop stalled past it) and, back in the queue, the gate took it. The call under
   * way carries on under the new lock; no second call is made, and the new admission goes back.
   */
  private takenAgain(
    job: Job<JobData, JobResult>,
    token: string,
    reservation: Reservation,
    trial: boolean,
  ): boolean {
    const earlier = [...this.running].find((r) => r.job.id === job.id);
    if (!earlier) return false;
    earlier.token = token;
    this.limiter.release(reservation).catch(() => {});
    if (trial) {
      const breaker = this.pool?.of(reservation)?.breaker ?? this.breaker;
      breaker.abandonTrial().catch(() => {});
    }
    this.log.warn('job taken again while its call ran: its lock had lapsed; the call carries on', {
      job: job.id,
    });
    return true;
  }

  health(): ReturnType<WorkerHandle['health']> {
    const draining = this.stopper.signal.aborted;
    const { concurrency } = this;
    return { draining, inFlight: this.inFlight(), concurrency, ...this.progress.read(draining) };
  }

  stop(graceMs = 30_000): Promise<void> {
    this.stopping ??= this.close(graceMs);
    return this.stopping;
  }

  private async close(graceMs: number): Promise<void> {
    this.stopper.abort();
    this.unwatchRedis?.();
    await this.loop;
    await this.presence?.stop();
    this.handoff.completeAlone();
    const all = Promise.all([...this.running].map((r) => r.done));
    const timer = setTimeout(() => {
      for (const r of this.running) r.abort.abort();
    }, graceMs);
    await all;
    clearTimeout(timer);
    clearInterval(this.renewer);
    await this.bull.close();
    await this.dlq.close();
    for (const c of [this.dlqRedis, this.metricsRedis]) await c.quit().catch(() => c.disconnect());
    await (this.bull.opts.connection as RedisClient).quit().catch(() => {});
    await this.breaker.abandonTrial().catch(() => {});
    await this.pool?.abandonTrials();
    await this.limiter.close();
    await this.idleWait.close();
    await this.subscriber.quit().catch(() => this.subscriber.disconnect());
    await this.layout?.release();
  }
}

/**
 * Starts a worker; resolves once it pulls jobs. It takes a job only after the shared budget in
 * Redis admits its cost, calls the provider, and stores the result, retries the job, pauses
 * every worker on a 429, or dead-letters it with the reason. Any number of workers, in any
 * number of processes, behave as one pool under the same limits.
 *
 * @example
 * ```ts
 * const redis = connectRedis(config.redisUrl);
 * const worker = await startWorker({
 *   redis,
 *   names: { prefix: config.prefix, queue: config.queue },
 *   client: createProviderClient({ apiKey: process.env.ANTHROPIC_API_KEY ?? '' }),
 *   limiter: { limits: { tokens: 80_000 }, windowMs: 60_000 },
 * });
 * // … later
 * await worker.stop();
 * await redis.quit();
 * ```
 */
export function startWorker(options: WorkerOptions): Promise<WorkerHandle> {
  return Worker.start(options);
}
