import { FlowProducer } from 'bullmq';
import type { Via } from '../shared/batch-via.ts';
import { BudgetLedger, worstCaseMicros } from '../shared/budgets.ts';
import { RedisOutOfMemoryError, RequestValidationError } from '../shared/errors.ts';
import { type LimitSet, readFleetLimits } from '../shared/fleet-limits.ts';
import type { JobData, JobResult } from '../shared/job.ts';
import { bullPrefix, type QueueNames } from '../shared/keys.ts';
import { readProviderLimits } from '../shared/limiter/provider-limits.ts';
import { PageCosts } from '../shared/page-costs.ts';
import {
  type DeadLetterQueue,
  type LlmqQueue,
  openDeadLetterQueue,
  openQueue,
  registerQueue,
} from '../shared/queues.ts';
import { describeRedis, type RedisClient, untilReady } from '../shared/redis.ts';
import { BatchJobs, checkBatchable } from './batches/batch-jobs.ts';
import { type AddContext, addInChunks, addMapReduce, addOne } from './bounded-adds.ts';
import {
  type CancelContext,
  type CancelOutcome,
  cancelJob,
  finishStrandedCancels,
} from './cancel.ts';
import { DepthGate } from './depth-gate.ts';
import type { DocumentCoster } from './documents/document-coster.ts';
import type {
  DocumentOptions,
  DocumentSource,
  EnqueuedDocument,
} from './documents/enqueue-document.ts';
import { withRedis } from './errors.ts';
import { buildMapReduce, type EnqueuedFlow, type MapReduceRequest } from './flows.ts';
import { jobIdForKey, newJobId } from './idempotency.ts';
import { checkAttempts, checkChunk, JobBuilder, reservedCost } from './job-builder.ts';
import { type JobOptionsOf, jobOptionsFor } from './job-options.ts';
import { type JobStatus, readJobStatus } from './job-status.ts';
import type {
  EnqueuedJob,
  EnqueueManyOptions,
  EnqueueOptions,
  ProducerOptions,
} from './producer-options.ts';
import { ResultWaiter, type WaitOptions } from './result-waiter.ts';

type EnqueueDocument = typeof import('./documents/enqueue-document.ts').enqueueDocument;

export type {
  EnqueuedJob,
  EnqueueManyOptions,
  EnqueueOptions,
  ProducerOptions,
  TokenCounter,
} from './producer-options.ts';

/**
 * Adds Messages requests to a queue: validated, costed (input estimate erring high plus the
 * whole of max_tokens, or the provider's count), refused when they could never fit a limit, kept
 * under the queue's depth bound, deduplicated by idempotency key. Make one with
 * {@link createProducer}; `waitForResult` is the way to get an answer back.
 *
 * @example
 * ```ts
 * const ids = await producer.enqueueMany(prompts.map((p) => ({
 *   model: 'claude-haiku-4-5', max_tokens: 200, messages: [{ role: 'user', content: p }],
 * })), { priority: 'batch', tenant: 'acme' });
 * const results = await Promise.all(ids.map((id) => producer.waitForResult(id)));
 * ```
 */
export class Producer {
  /** The BullMQ queue the jobs go to. @internal */
  readonly queue: LlmqQueue;
  /** The queue's dead letters. @internal */
  readonly deadLetters: DeadLetterQueue;
  /** The queue's depth bound. @internal */
  readonly gate: DepthGate;
  private readonly redis: RedisClient;
  private readonly names: QueueNames;
  private readonly builder: JobBuilder;
  /** What PDF pages cost, as the fleet learned it (read before a request with PDFs is built). @internal */
  readonly pageCosts: PageCosts;
  private readonly ledger: BudgetLedger | undefined;
  private readonly redisUrl: string;
  private readonly commandTimeoutMs: number;
  private readonly jobOptions: JobOptionsOf;
  private readonly ownsRedis: boolean;
  private readonly onOutOfMemory: ProducerOptions['onRedisOutOfMemory'];
  private waiter: ResultWaiter | undefined;
  /** Counts documents with the provider within the fleet's count_tokens budget (made on first use). */
  private documents: Promise<{ coster: DocumentCoster; enqueue: EnqueueDocument }> | undefined;
  private readonly countTokensRpm: number | undefined;
  private readonly tokenCounter: ProducerOptions['tokenCounter'];
  private batches: BatchJobs | undefined;
  private flows: FlowProducer | undefined;
  private readonly adds: AddContext;
  private readonly cancels: CancelContext;
  private registered = false;
  /** When the fleet's limits were last read (ms), or undefined when they are not read at all. */
  private fleetReadAt: number | undefined;
  /** When the provider's limits of each scope were last read (ms). */
  private readonly readingsAt = new Map<string, number>();
  private readonly fleetMaxAgeMs: number;

  /** Use {@link createProducer}, which makes one from a {@link Config}. @internal */
  constructor(options: ProducerOptions) {
    this.redis = options.redis;
    this.ownsRedis = options.ownsRedis ?? false;
    this.onOutOfMemory = options.onRedisOutOfMemory;
    this.names = options.names;
    this.ledger =
      options.budgets && new BudgetLedger(options.redis, options.names, options.budgets);
    this.pageCosts = new PageCosts({ redis: options.redis, names: options.names });
    this.tokenCounter = options.tokenCounter;
    this.countTokensRpm = options.countTokensRpm;
    this.builder = new JobBuilder({
      pageCosts: this.pageCosts,
      limits: options.limits,
      scopes: options.scopes,
      modelsStrict: options.modelsStrict,
      headroom: options.headroom,
      ledger: this.ledger,
      tokenCounter: options.tokenCounter,
      deployments: options.deployments,
      batchDeployments: options.batchDeployments,
    });
    this.commandTimeoutMs = options.commandTimeoutMs ?? 10_000;
    this.fleetReadAt = options.fleetLimits === false ? undefined : Number.NEGATIVE_INFINITY;
    this.fleetMaxAgeMs = options.fleetLimitsMaxAgeMs ?? 1_000;
    this.jobOptions = jobOptionsFor(options);
    this.redisUrl = options.redisUrl ?? describeRedis(this.redis);
    this.queue = openQueue(this.redis, this.names);
    this.deadLetters = openDeadLetterQueue(this.redis, this.names);
    // Connection trouble surfaces as typed errors from each call; the emitters must not throw.
    this.queue.on('error', () => {});
    this.deadLetters.on('error', () => {});
    this.gate = new DepthGate({
      redis: this.redis,
      names: this.names,
      queue: this.queue,
      maxDepth: options.maxDepth ?? 0,
      tenantMaxDepth: options.tenantMaxDepth,
      maxDepthBytes: options.maxDepthBytes ?? 0,
      tenantMaxBytes: options.tenantMaxBytes,
      reservationTtlMs: options.reservationTtlMs,
      retryAfterMs: options.retryAfterMs,
      call: (op) => this.redisCall(op),
    });
    const call = <T>(op: () => Promise<T>) => this.redisCall(op);
    this.adds = {
      names: this.names,
      queue: this.queue,
      gate: this.gate,
      call,
      jobOptions: this.jobOptions,
    };
    this.cancels = { queue: this.queue, gate: this.gate, call, status: (id) => this.status(id) };
  }

  /** The fleet's stored limits, read again after `fleetLimitsMaxAgeMs` (or `force`). @internal */
  async loadLimits(force = false): Promise<LimitSet> {
    const at = this.fleetReadAt;
    if (at !== undefined && (force || Date.now() - at >= this.fleetMaxAgeMs)) {
      const stored = await this.redisCall(() => readFleetLimits(this.redis, this.names));
      this.builder.useFleet(stored?.limits);
      this.fleetReadAt = Date.now();
    }
    return this.builder.limits;
  }

  /**
   * The limits, the provider's as read for the models of `requests`, and what their PDF pages
   * cost as learned: all that a job is checked and reserved against, read before it is built.
   */
  private async loadCosting(requests: readonly unknown[]): Promise<void> {
    const models = new Set<string>();
    for (const r of requests) {
      const model = (r as { model?: unknown } | null)?.model;
      if (typeof model === 'string') models.add(model);
    }
    await this.loadLimits();
    await this.loadReadings([...models]);
    // Unread, a page is reserved at the most it costs: the learning is an optimisation.
    const paged = new Set(requests.filter(holdsPdf).map((r) => (r as { model: string }).model));
    await Promise.all([...paged].map((m) => this.pageCosts.read(m).catch(() => undefined)));
  }

  /**
   * The provider's limits read for these models' scopes, read again after `fleetLimitsMaxAgeMs`
   * (a scope without any, every time).
   */
  private async loadReadings(models: readonly string[]): Promise<void> {
    if (this.fleetReadAt === undefined) return;
    const now = Date.now();
    const due = [...new Set(models.flatMap((m) => this.builder.scopesOf(m)))].filter(
      (scope) =>
        now - (this.readingsAt.get(scope) ?? Number.NEGATIVE_INFINITY) >= this.fleetMaxAgeMs,
    );
    if (due.length === 0) return;
    const read = await this.redisCall(() => readProviderLimits(this.redis, this.names, due));
    this.builder.useReadings(read);
    // A scope with no reading yet is read again at once: its first one is what a run waits for.
    for (const scope of due)
      if (Object.keys(read[scope] ?? {}).length > 0) this.readingsAt.set(scope, now);
  }

  /** The connection and the queue, for readers beside the producer (a batch run's ETA). @internal */
  get connection(): { readonly redis: RedisClient; readonly names: QueueNames } {
    return { redis: this.redis, names: this.names };
  }

  /** The share of each limit the fleet leaves unused, as last read. @internal */
  get headroom(): number {
    return this.builder.limits.headroom;
  }

  /**
   * The most input tokens a request may have to fit each limit it is charged to, the
   * provider's as read included. @internal
   */
  async inputRoom(model: string, maxTokens: number, tenant?: string): Promise<number> {
    await this.loadCosting([{ model }]);
    return this.builder.inputRoom(model, maxTokens, tenant);
  }

  /** The job's data from the estimate, or a typed error; writes nothing. @internal */
  prepare(request: unknown, options: EnqueueOptions = {}): JobData {
    return this.builder.prepare(request, options);
  }

  /** Like {@link prepare}, counting input with the provider under `exactCount`. @internal */
  prepareAsync(request: unknown, options: EnqueueOptions = {}): Promise<JobData> {
    return this.builder.prepareAsync(request, options);
  }

  /**
   * Validates, costs and adds one request; resolves with the job id (the first job's id for a
   * repeated idempotency key). Throws {@link RequestValidationError} (nothing written),
   * {@link CostExceedsLimitError} for a request that could never fit a limit, and
   * {@link QueueFullError} at the depth bound unless `wait` is set.
   *
   * @example
   * ```ts
   * const id = await producer.enqueue(
   *   { model: 'claude-haiku-4-5', max_tokens: 300, messages: [{ role: 'user', content: 'Hi' }] },
   *   { priority: 'interactive', tenant: 'acme', idempotencyKey: 'greeting-1' },
   * );
   * ```
   */
  async enqueue(request: unknown, options: EnqueueOptions = {}): Promise<string> {
    return (await this.enqueueJob(request, options)).id;
  }

  /**
   * {@link enqueue}, saying also whether a job was created or found; `counted`: the provider's
   * count of its input, reserved as is. @internal
   */
  async enqueueJob(
    request: unknown,
    options: EnqueueOptions = {},
    counted?: number,
  ): Promise<EnqueuedJob> {
    if (options.via === 'batches') checkBatchable(request, options);
    await this.loadCosting([request]);
    const data =
      counted === undefined
        ? await this.prepareAsync(request, options)
        : this.builder.prepareCounted(request, options, counted);
    if (options.via === 'batches') {
      const attempts = checkAttempts(options.attempts);
      await this.ensureRegistered();
      return this.redisCall(() =>
        this.batchJobs.add(data, options, this.jobOptions(data, attempts)),
      );
    }
    const id =
      options.idempotencyKey !== undefined
        ? jobIdForKey(options.idempotencyKey, data.tenant)
        : newJobId();
    const attempts = checkAttempts(options.attempts);
    await this.refuseSpent([data]);
    await this.ensureRegistered();
    return addOne(this.adds, id, data, attempts, options);
  }

  /**
   * Adds a map-reduce as one BullMQ flow, all or nothing: the part requests, then a combine
   * request that gets their answers, in order, after its last user message. The combine job
   * reserves, before its parts have answered, an upper bound: its template plus every part's
   * max_tokens. With an idempotency key every id is derived from it (the parts' from
   * `<key>:part-<i>`), and a key whose combine job exists adds nothing. Resolves with the
   * combine job's id, the one to wait for. Parts via batches skip the depth bound.
   *
   * @example
   * ```ts
   * const { id } = await producer.enqueueMapReduce({
   *   parts: chapters.map((c) => ({
   *     model, max_tokens: 300, messages: [{ role: 'user', content: c }],
   *   })),
   *   combine: { model, max_tokens: 500, messages: [{ role: 'user', content: 'Join them.' }] },
   * });
   * const summary = await producer.waitForResult(id);
   * ```
   */
  async enqueueMapReduce(
    flow: MapReduceRequest,
    options: EnqueueOptions = {},
  ): Promise<EnqueuedFlow> {
    return this.enqueueFlow(flow, options, []);
  }

  /**
   * {@link enqueueMapReduce}, its parts with a count in `counts` reserved at it. A combine job
   * already there under the key is re-attached with the part ids it holds. @internal
   */
  async enqueueFlow(
    flow: MapReduceRequest,
    options: EnqueueOptions,
    counts: readonly (number | undefined)[],
  ): Promise<EnqueuedFlow> {
    const attempts = checkAttempts(options.attempts);
    await this.loadCosting(flow.parts);
    const built = buildMapReduce(this.builder, flow, options, counts);
    await this.ensureRegistered();
    const partIds = await this.existing(built.id, 'messages');
    if (partIds) return { id: built.id, partIds, created: false };
    this.flows ??= new FlowProducer({ connection: this.redis, prefix: bullPrefix(this.names) });
    return addMapReduce(this.adds, this.flows, built, attempts, options);
  }

  /**
   * Enqueues a document (text, a PDF, or content blocks such as images) to be asked a prompt, a
   * summary by default: one job when it fits one call, else its parts (text cut on paragraphs,
   * a PDF by page ranges, blocks in runs), each fitting the fleet's limits (configured, or read
   * from the provider's headers) and the model's context, then a job that combines their
   * answers. Where llmq's guess of a cost would decide how it is sent, the provider's
   * `count_tokens` is asked, within the fleet's budget for it (`countTokensRpm`). Wait for
   * the returned `id` with {@link Producer.waitForResult}. A document that cannot be sent (an
   * encrypted PDF, a page larger than any call) throws a {@link RequestValidationError} whose
   * field is `document`, saying why and what to do; one that can never fit a limit, a
   * {@link CostExceedsLimitError}. Nothing is enqueued then.
   *
   * @example
   * ```ts
   * const { id, parts } = await producer.enqueueDocument(
   *   { pdf: await readFile('annual-report.pdf') },
   *   { maxTokens: 512, idempotencyKey: 'annual-report-2026' },
   * );
   * const summary = await producer.waitForResult(id); // the combined summary when parts > 1
   * ```
   */
  async enqueueDocument(
    source: DocumentSource,
    options: DocumentOptions = {},
  ): Promise<EnqueuedDocument> {
    const { coster, enqueue } = await this.documentParts();
    return enqueue({ ...this.documentQueue(), coster }, source, options);
  }

  /** What enqueueing documents needs, loaded on first use (most producers send none). */
  private documentParts() {
    this.documents ??= (async () => {
      const [{ DocumentCoster }, { CountTokensBudget }, { enqueueDocument }] = await Promise.all([
        import('./documents/document-coster.ts'),
        import('./count-tokens-budget.ts'),
        import('./documents/enqueue-document.ts'),
      ]);
      const budget = new CountTokensBudget({
        redis: this.redis,
        names: this.names,
        rpm: this.countTokensRpm,
      });
      const coster = new DocumentCoster({
        counter: this.tokenCounter,
        budget,
        pageCosts: this.pageCosts,
      });
      return { coster, enqueue: enqueueDocument };
    })();
    return this.documents;
  }

  /** This producer as `enqueueDocument` uses it. */
  private documentQueue() {
    return {
      inputRoom: (model: string, maxTokens: number, tenant?: string) =>
        this.inputRoom(model, maxTokens, tenant),
      pageCosts: this.pageCosts,
      existing: (id: string, via: Via) => this.existing(id, via),
      enqueueJob: (request: unknown, options: EnqueueOptions, counted?: number) =>
        this.enqueueJob(request, options, counted),
      enqueueFlow: (
        flow: MapReduceRequest,
        options: EnqueueOptions,
        counts: readonly (number | undefined)[],
      ) => this.enqueueFlow(flow, options, counts),
    };
  }

  /**
   * The part ids of a job already there under `id` (none when it is one call), or undefined
   * when there is none. Batch-bound jobs are looked for too with `via: 'batches'`. @internal
   */
  async existing(id: string, via: Via): Promise<readonly string[] | undefined> {
    const queues = via === 'batches' ? [this.queue, this.batchJobs.queue] : [this.queue];
    for (const queue of queues) {
      const job = await this.redisCall(() => queue.getJob(id));
      if (job) return job.data?.combine?.parts ?? [];
    }
    return undefined;
  }

  /**
   * Adds many requests with BullMQ's addBulk, in chunks. Every request is validated (and costed)
   * before anything is written: one bad request adds nothing, and the error names it
   * (`3.max_tokens`). Under a depth bound each chunk is all or nothing: it is added whole once
   * the whole chunk fits (with `wait`), or not at all (QueueFullError; earlier chunks stay added
   * and were reported to `onChunk`). A Redis failure in the middle of a chunk can leave part of
   * that chunk added, each job whole; with idempotency keys a retry adds only the rest.
   * Resolves with one id per request, in order.
   *
   * @example
   * ```ts
   * const ids = await producer.enqueueMany(requests, {
   *   priority: 'batch',
   *   wait: true, // wait for room under the depth bound instead of throwing QueueFullError
   *   onChunk: (chunk, first) => console.log(`added ${first}…${first + chunk.length - 1}`),
   * });
   * ```
   */
  async enqueueMany(
    requests: readonly unknown[],
    options: EnqueueManyOptions = {},
  ): Promise<string[]> {
    const keys = options.idempotencyKeys;
    if (keys && keys.length !== requests.length) {
      throw new RequestValidationError([
        {
          field: 'idempotencyKeys',
          message: `must hold one entry per request (${requests.length}), got ${keys.length}`,
        },
      ]);
    }
    const attempts = checkAttempts(options.attempts);
    await this.loadCosting(requests);
    const datas = await this.prepareEach(requests, options);
    if (options.via === 'batches') {
      // Batch-bound jobs skip the depth bound: add them one by one (the submitter groups them).
      for (const r of requests) checkBatchable(r, options);
      const added: string[] = [];
      for (const [i, r] of requests.entries()) {
        const key = keys?.[i];
        added.push(
          (await this.enqueueJob(r, { ...options, ...(key ? { idempotencyKey: key } : {}) })).id,
        );
      }
      options.onChunk?.(added, 0);
      return added;
    }
    const tenant = datas[0]?.tenant;
    const ids = datas.map((_, i) => {
      const key = keys?.[i];
      return key !== undefined ? jobIdForKey(key, tenant) : newJobId();
    });
    const size = Math.min(checkChunk(options.chunkSize), this.gate.largestChunk(tenant));
    await this.refuseSpent(datas);
    await this.ensureRegistered();
    await addInChunks(this.adds, ids, datas, size, attempts, options);
    return ids;
  }

  /**
   * Resolves with a job's result once it completes, however long ago it was enqueued and by
   * whom; rejects with {@link JobFailedError} (the dead letter's reason), {@link WaitTimeoutError}
   * after `timeout` (the job goes on), or an {@link LlmqError} with code `JOB_NOT_FOUND`. Pass
   * `via: 'batches'` for a job enqueued that way.
   *
   * @example
   * ```ts
   * try {
   *   const result = await producer.waitForResult(id, { timeout: 60_000 });
   *   console.log(result.message.content, result.message.usage);
   * } catch (err) {
   *   if (err instanceof JobFailedError) console.error(err.reason);
   *   else throw err;
   * }
   * ```
   */
  async waitForResult(id: string, options: WaitOptions & { via?: Via } = {}): Promise<JobResult> {
    if (options.via === 'batches') return this.batchJobs.wait(id, options);
    this.waiter ??= new ResultWaiter({
      redis: this.redis,
      names: this.names,
      queue: this.queue,
      deadLetters: this.deadLetters,
    });
    const waiter = this.waiter;
    await this.redisCall(() => waiter.ready());
    return waiter.wait(id, options);
  }

  /**
   * A job's state and, once finished, its result or failure (batch-bound jobs too); null when
   * there is no such job. It reads; to wait for the end use {@link Producer.waitForResult}.
   *
   * @example
   * ```ts
   * const s = await producer.status(id);
   * if (s?.state === 'failed') console.error(s.error.reason);
   * ```
   */
  async status(id: string): Promise<JobStatus | null> {
    const s = await this.redisCall(() => readJobStatus(this.queue, this.deadLetters, id));
    if (s) return s;
    const batchBound = await this.redisCall(() =>
      readJobStatus(this.batchJobs.queue, this.deadLetters, id),
    );
    return batchBound && { ...batchBound, via: 'batches' };
  }

  /**
   * Cancels a job that has not started: takes it out of the waiting states atomically (no
   * worker can pick it up after that) and removes it. Resolves `cancelled`, `not_found`, or the
   * state that forbids it (`active`, `completed`, `failed`).
   *
   * @example
   * ```ts
   * if ((await producer.cancel(id)) === 'active') console.log('already running');
   * ```
   */
  cancel(id: string): Promise<CancelOutcome> {
    return cancelJob(this.cancels, id);
  }

  /**
   * Finishes cancels whose job was taken out but never removed (a producer that died between
   * the two steps, or a take-out that ran after its caller had given up on Redis).
   * @internal
   */
  finishStrandedCancels(olderThanMs = 30_000): Promise<number> {
    return finishStrandedCancels(this.cancels, olderThanMs);
  }

  /** The batch-bound jobs of this queue (opened on first use). @internal */
  get batchJobs(): BatchJobs {
    this.batches ??= new BatchJobs(this.redis, this.names, this.deadLetters);
    return this.batches;
  }

  /**
   * Resolves once the Redis connection is ready; rejects with an {@link LlmqError} with code
   * `REDIS_UNAVAILABLE` after the command timeout.
   *
   * @example
   * ```ts
   * await producer.ready(); // at start-up, to fail early when Redis is down
   * ```
   */
  async ready(): Promise<void> {
    await this.redisCall(() => untilReady(this.redis));
  }

  /**
   * Closes the queues it opened, and its Redis connection when it owns it (`createProducer`'s
   * does). Jobs already enqueued stay queued.
   *
   * @example
   * ```ts
   * await producer.close();
   * ```
   */
  async close(): Promise<void> {
    await this.waiter?.close();
    await this.batches?.close();
    await this.flows?.close();
    await Promise.all([this.queue.close(), this.deadLetters.close()]);
    if (this.ownsRedis) await this.redis.quit().catch(() => this.redis.disconnect());
  }

  /** Every request's job data, in order; an error names the request (`3.max_tokens`). */
  private async prepareEach(
    requests: readonly unknown[],
    o: EnqueueManyOptions,
  ): Promise<JobData[]> {
    const datas: JobData[] = [];
    for (const [i, r] of requests.entries()) {
      try {
        datas.push(o.exactCount ? await this.prepareAsync(r, o) : this.prepare(r, o));
      } catch (err) {
        if (!(err instanceof RequestValidationError)) throw err;
        const issues = err.issues.map((s) => ({ field: `${i}.${s.field}`, message: s.message }));
        throw new RequestValidationError(issues);
      }
    }
    return datas;
  }

  /** Under the `refuse` policy, a job whose budget is spent is refused with budget_exhausted. */
  private async refuseSpent(datas: readonly JobData[]): Promise<void> {
    const l = this.ledger;
    if (l === undefined || l.settings.policy !== 'refuse') return;
    for (const d of datas) {
      const micros = worstCaseMicros(l.settings, d.request.model, reservedCost(d.cost, d.pdfPages));
      const over = await this.redisCall(() => l.noRoom(d.tenant, micros));
      if (over) throw over;
    }
  }

  private async ensureRegistered(): Promise<void> {
    if (this.registered) return;
    await this.redisCall(() => registerQueue(this.redis, this.names));
    this.registered = true;
  }

  private async redisCall<T>(op: () => Promise<T>): Promise<T> {
    try {
      return await withRedis(this.redisUrl, this.commandTimeoutMs, op);
    } catch (err) {
      if (err instanceof RedisOutOfMemoryError) this.onOutOfMemory?.(err);
      throw err;
    }
  }
}

/** Whether a request (unchecked) sends a PDF's bytes: its model's page costs are read first. */
function holdsPdf(request: unknown): boolean {
  const r = request as { model?: unknown; messages?: unknown } | null;
  if (typeof r?.model !== 'string' || !Array.isArray(r.messages)) return false;
  return r.messages.some(
    (m: { content?: unknown } | null) =>
      Array.isArray(m?.content) &&
      m.content.some(
        (b: { type?: unknown; source?: { type?: unknown } } | null) =>
          b?.type === 'document' && b.source?.type === 'base64',
      ),
  );
}
