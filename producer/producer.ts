import type { Via } from '../shared/batch-via.ts';
import { type BudgetLedger, worstCaseMicros } from '../shared/budgets.ts';
import { RedisOutOfMemoryError, RequestValidationError } from '../shared/errors.ts';
import type { LimitSet } from '../shared/fleet-limits.ts';
import type { JobData, JobResult } from '../shared/job.ts';
import type { QueueNames } from '../shared/keys.ts';
import { stampQueue } from '../shared/layout.ts';
import { type DeadLetterQueue, type LlmqQueue, registerQueue } from '../shared/queues.ts';
import { describeRedis, type RedisClient, untilReady } from '../shared/redis.ts';
import { BatchJobs, checkBatchable } from './batches/batch-jobs.ts';
import { type AddContext, addInChunks, addOne } from './bounded-adds.ts';
import {
  type CancelContext,
  type CancelOutcome,
  cancelJob,
  finishStrandedCancels,
} from './cancel.ts';
import type { Costing } from './costing.ts';
import type { DepthGate } from './depth-gate.ts';
import type { DocumentSender } from './documents/document-sender.ts';
import type {
  DocumentOptions,
  DocumentSource,
  EnqueuedDocument,
} from './documents/enqueue-document.ts';
import { withRedis } from './errors.ts';
import type { FlowAdds } from './flow-adds.ts';
import type { EnqueuedFlow, MapReduceRequest } from './flows.ts';
import { jobIdForKey, newJobId } from './idempotency.ts';
import { checkAttempts, checkChunk, reservedCost } from './job-builder.ts';
import type { JobOptionsOf } from './job-options.ts';
import { type JobStatus, readJobStatus } from './job-status.ts';
import type {
  EnqueuedJob,
  EnqueueManyOptions,
  EnqueueOptions,
  ProducerOptions,
} from './producer-options.ts';
import { producerParts } from './producer-parts.ts';
import { ResultWaiter, type WaitOptions } from './result-waiter.ts';

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
  /** What a job is checked and reserved against, read before it is built. @internal */
  readonly costing: Costing;
  private readonly options: ProducerOptions;
  private readonly ledger: BudgetLedger | undefined;
  private readonly redisUrl: string;
  private readonly commandTimeoutMs: number;
  private readonly jobOptions: JobOptionsOf;
  private readonly ownsRedis: boolean;
  private readonly onOutOfMemory: ProducerOptions['onRedisOutOfMemory'];
  private waiter: ResultWaiter | undefined;
  /** Sends documents (made with the first one). */
  private documents: Promise<DocumentSender> | undefined;
  private batches: BatchJobs | undefined;
  private readonly flowAdds: FlowAdds;
  private readonly adds: AddContext;
  private readonly cancels: CancelContext;
  private registered = false;

  /** Use {@link createProducer}, which makes one from a {@link Config}. @internal */
  constructor(options: ProducerOptions) {
    this.options = options;
    this.redis = options.redis;
    this.ownsRedis = options.ownsRedis ?? false;
    this.onOutOfMemory = options.onRedisOutOfMemory;
    this.names = options.names;
    this.commandTimeoutMs = options.commandTimeoutMs ?? 10_000;
    this.redisUrl = options.redisUrl ?? describeRedis(this.redis);
    const parts = producerParts(options, {
      call: (op) => this.redisCall(op),
      status: (id) => this.status(id),
      registered: () => this.ensureRegistered(),
      batchQueue: () => this.batchJobs.queue,
    });
    this.ledger = parts.ledger;
    this.costing = parts.costing;
    this.jobOptions = parts.jobOptions;
    this.queue = parts.queue;
    this.deadLetters = parts.deadLetters;
    this.gate = parts.gate;
    this.adds = parts.adds;
    this.cancels = parts.cancels;
    this.flowAdds = parts.flowAdds;
  }

  /** The fleet's stored limits, read again after `fleetLimitsMaxAgeMs` (or `force`). @internal */
  loadLimits(force = false): Promise<LimitSet> {
    return this.costing.limits(force);
  }

  /** What costing `requests` reads first: the limits, the provider's readings. @internal */
  loadCosting(requests: readonly unknown[]): Promise<void> {
    return this.costing.load(requests);
  }

  /** The job's data from the estimate, or a typed error; writes nothing. @internal */
  prepare(request: unknown, options: EnqueueOptions = {}): JobData {
    return this.costing.builder.prepare(request, options);
  }

  /** Like {@link prepare}, counting input with the provider under `exactCount`. @internal */
  prepareAsync(request: unknown, options: EnqueueOptions = {}): Promise<JobData> {
    return this.costing.builder.prepareAsync(request, options);
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
    await this.costing.load([request]);
    const data =
      counted === undefined
        ? await this.prepareAsync(request, options)
        : this.costing.builder.prepareCounted(request, options, counted);
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
  enqueueMapReduce(flow: MapReduceRequest, options: EnqueueOptions = {}): Promise<EnqueuedFlow> {
    return this.flowAdds.add(flow, options, []);
  }

  /**
   * Enqueues a document (text, a PDF, or blocks such as images) to be asked a prompt, a summary
   * by default: one job when it fits a call, else its parts (text by paragraphs, a PDF by page
   * ranges, blocks in runs), each fitting the fleet's limits and the model's context, and a job
   * combining their answers: wait for `id`. Costs the guess would decide are asked of the
   * provider's `count_tokens`, within the fleet's budget (`countTokensRpm`). What cannot be sent
   * throws {@link RequestValidationError} (field `document`: why, what to do) or
   * {@link CostExceedsLimitError}, nothing enqueued.
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
    const { tokenCounter: counter, countTokensRpm } = this.options;
    this.documents ??= import('./documents/document-sender.ts').then(
      ({ DocumentSender }) =>
        new DocumentSender({ costing: this.costing, counter, countTokensRpm }),
    );
    const queue = {
      costing: this.costing,
      existing: (id: string, via: Via) => this.flowAdds.existing(id, via),
      enqueueJob: (r: unknown, o: EnqueueOptions, n?: number) => this.enqueueJob(r, o, n),
      enqueueFlow: this.flowAdds.add.bind(this.flowAdds),
    };
    return (await this.documents).send(queue, source, options);
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
    checkAttempts(options.attempts);
    await this.costing.load(requests);
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
    return this.addPrepared(datas, options);
  }

  /**
   * The adding half of {@link enqueueMany}, for job data already {@link prepare}d (after
   * `costing.load`) under the same options; not for `via: 'batches'`. @internal
   */
  async addPrepared(datas: readonly JobData[], options: EnqueueManyOptions): Promise<string[]> {
    const keys = options.idempotencyKeys;
    const attempts = checkAttempts(options.attempts);
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
    await this.flowAdds.close();
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
    await this.redisCall(() => stampQueue(this.redis, this.names));
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
