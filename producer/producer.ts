import { FlowProducer } from 'bullmq';
import { BudgetLedger, type BudgetSettings, worstCaseMicros } from '../shared/budgets.ts';
import { combineInputTokens } from '../shared/combine.ts';
import { amountOf, DIMENSION_NAMES } from '../shared/dimensions.ts';
import { CostExceedsLimitError, RequestValidationError } from '../shared/errors.ts';
import { type Cost, estimateCost } from '../shared/estimate.ts';
import { JOB_NAME, type JobData, type JobResult } from '../shared/job.ts';
import { bullPrefix, type QueueNames } from '../shared/keys.ts';
import { type DimensionLimits, GLOBAL_SCOPE } from '../shared/limiter/types.ts';
import { contextTokensOf, isModelScope, modelScopeOf, patternOfScope } from '../shared/models.ts';
import { type PriorityLane, resolvePriority } from '../shared/priority.ts';
import {
  type DeadLetterQueue,
  type LlmqQueue,
  openDeadLetterQueue,
  openQueue,
  registerQueue,
} from '../shared/queues.ts';
import { describeRedis, type RedisClient } from '../shared/redis.ts';
import { type MessagesRequest, parseMessagesRequest } from '../shared/request.ts';
import { endEnqueueSpan, startEnqueueSpan } from '../shared/telemetry/job-spans.ts';
import { BatchJobs, checkBatchable } from './batches/batch-jobs.ts';
import type { Via } from './batches/via.ts';
import { DepthGate, type WaitForRoomOptions } from './depth-gate.ts';
import { withRedis } from './errors.ts';
import { type EnqueuedFlow, type MapReduceRequest, mapReduceFlow, partKey } from './flows.ts';
import { checkIdempotencyKey, jobIdForKey, newJobId } from './idempotency.ts';
import { type JobStatus, readJobStatus } from './job-status.ts';
import { ResultWaiter, type WaitOptions } from './result-waiter.ts';

/** What `exactCount` needs: the SDK's `client.messages.countTokens` (an `Anthropic` instance fits). */
export interface TokenCounter {
  readonly messages: {
    countTokens(params: never): PromiseLike<{ readonly input_tokens: number }>;
  };
}

export interface ProducerOptions {
  /** The connection the producer uses; it closes it only when `ownsRedis`. */
  readonly redis: RedisClient;
  /** Close `redis` with the producer. @default false */
  readonly ownsRedis?: boolean;
  readonly names: QueueNames;
  /** Limits of the global scope, to refuse a job that could never fit. */
  readonly limits?: DimensionLimits;
  /** Limits of nested scopes (`tenant:acme`, `model:claude-sonnet-*`). */
  readonly scopes?: Readonly<Record<string, DimensionLimits>>;
  /** Refuse a job whose model matches no `model:` scope (Config.modelsStrict). @default false */
  readonly modelsStrict?: boolean;
  /** Money budgets (Config.budgets): a job that can never fit one is refused; so is one whose budget is spent under the `refuse` policy. */
  readonly budgets?: BudgetSettings | undefined;
  /**
   * The share of each limit the limiter keeps unused (Config.headroom): a cost above what is
   * left can never be admitted, so it is refused here already. @default 0
   */
  readonly headroom?: number;
  /** Waiting jobs allowed in the queue (Config.maxDepth); 0 for no bound. @default 0 */
  readonly maxDepth?: number;
  /** Waiting jobs allowed per tenant: one number for all, or per name (`'*'` for the rest). */
  readonly tenantMaxDepth?: number | Readonly<Record<string, number>>;
  /** The retry hint of a {@link QueueFullError}. @default 1_000 */
  readonly retryAfterMs?: number;
  /** How long a depth reservation outlives a producer that died mid-add. @default 30_000 */
  readonly reservationTtlMs?: number;
  /** Counts input tokens exactly when an enqueue asks for `exactCount`. */
  readonly tokenCounter?: TokenCounter;
  /** Only for error messages (never logged with a password). @default taken from `redis` */
  readonly redisUrl?: string;
  /** A Redis command that takes longer fails with RedisUnavailableError. @default 10_000 */
  readonly commandTimeoutMs?: number;
  /** Seconds a completed job (its result, its idempotency key) is kept. @default 604_800 (7 days) */
  readonly keepCompletedS?: number;
  /** Completed jobs kept at most. @default 100_000 */
  readonly keepCompletedCount?: number;
  /** Seconds a failed (dead-lettered) job is kept. @default 604_800 (7 days) */
  readonly keepFailedS?: number;
}

export interface EnqueueOptions extends WaitForRoomOptions {
  /** A lane or a number, 1 the most urgent. @default 'default' */
  readonly priority?: PriorityLane | number | string;
  /** The tenant the job belongs to; its limiter scope is `tenant:<name>`. */
  readonly tenant?: string;
  /**
   * The same key never makes a second job (in any process) while the first exists: the first
   * job's id comes back instead. Scoped by tenant. See `idempotency.ts` for what happens after
   * the first job is removed.
   */
  readonly idempotencyKey?: string;
  /** Stream the response. */
  readonly stream?: boolean;
  /** Append the provider's stream events to the job's event stream for a reader (implies `stream`). */
  readonly relayEvents?: boolean;
  /** `anthropic-version` and `anthropic-beta` to send with the call; no other header. */
  readonly providerHeaders?: Readonly<Record<string, string>>;
  /** Per-call timeout in ms. @default 600_000 (the worker's default) */
  readonly timeoutMs?: number;
  /** Tries for retryable failures. @default 5 */
  readonly attempts?: number;
  /** Free-form labels kept with the job. */
  readonly meta?: Readonly<Record<string, string>>;
  /** Count input tokens with the provider's count_tokens instead of estimating. @default false */
  readonly exactCount?: boolean;
  /**
   * `batches`: run it through Message Batches (half the price, outside per-minute limits, done
   * within 24 h) once a batch submitter runs; see producer/batches. @default 'messages'
   */
  readonly via?: Via;
  /** For `via: 'batches'`: when it must be done by (ms since the epoch). */
  readonly deadlineAt?: number;
  /**
   * W3C traceparent the job's trace continues (an HTTP request's); else the active span's.
   * @default undefined
   */
  readonly traceparent?: string;
}

export interface EnqueueManyOptions extends Omit<EnqueueOptions, 'idempotencyKey'> {
  /** One key (or undefined) per request, in the same order. */
  readonly idempotencyKeys?: readonly (string | undefined)[];
  /** Jobs per addBulk call and per depth reservation (capped by the bounds). @default 1_000 */
  readonly chunkSize?: number;
  /** Called after each chunk was added, with the ids of the whole chunk (existing ones too). */
  readonly onChunk?: (ids: readonly string[], firstIndex: number) => void;
}

/** What one enqueue did. */
export interface EnqueuedJob {
  readonly id: string;
  /** False when an idempotency key found the job already there. */
  readonly created: boolean;
}

const TENANT = /^[A-Za-z0-9_.@-]{1,100}$/;
const DAY_S = 24 * 3600;

/**
 * Adds Messages requests to a queue: validated, costed (input estimate erring high plus the
 * whole of max_tokens, or the provider's count), refused when they could never fit a limit, kept
 * under the queue's depth bound, deduplicated by idempotency key.
 */
export class Producer {
  readonly queue: LlmqQueue;
  readonly deadLetters: DeadLetterQueue;
  readonly gate: DepthGate;
  private readonly redis: RedisClient;
  private readonly names: QueueNames;
  private readonly limits: DimensionLimits;
  private readonly scopeLimits: Readonly<Record<string, DimensionLimits>>;
  private readonly headroom: number;
  /** The model patterns of the `model:` scopes, and whether a model must match one. */
  private readonly models: { readonly patterns: readonly string[]; readonly strict: boolean };
  private readonly tokenCounter: TokenCounter | undefined;
  private readonly ledger: BudgetLedger | undefined;
  private readonly redisUrl: string;
  private readonly commandTimeoutMs: number;
  private readonly retention: { completedS: number; completedCount: number; failedS: number };
  private readonly ownsRedis: boolean;
  private waiter: ResultWaiter | undefined;
  private batches: BatchJobs | undefined;
  private flows: FlowProducer | undefined;
  private registered = false;

  constructor(options: ProducerOptions) {
    this.redis = options.redis;
    this.ownsRedis = options.ownsRedis ?? false;
    this.names = options.names;
    this.limits = options.limits ?? {};
    this.scopeLimits = options.scopes ?? {};
    this.headroom = options.headroom ?? 0;
    this.models = {
      patterns: Object.keys(this.scopeLimits).filter(isModelScope).map(patternOfScope),
      strict: options.modelsStrict ?? false,
    };
    this.tokenCounter = options.tokenCounter;
    this.ledger =
      options.budgets && new BudgetLedger(options.redis, options.names, options.budgets);
    this.commandTimeoutMs = options.commandTimeoutMs ?? 10_000;
    this.retention = {
      completedS: options.keepCompletedS ?? 7 * DAY_S,
      completedCount: options.keepCompletedCount ?? 100_000,
      failedS: options.keepFailedS ?? 7 * DAY_S,
    };
    this.redisUrl = options.redisUrl ?? describeRedis(this.redis);
    if (!(this.headroom >= 0 && this.headroom <= 0.5)) {
      throw new TypeError(`headroom must be a share from 0 to 0.5, got ${this.headroom}`);
    }
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
      reservationTtlMs: options.reservationTtlMs,
      retryAfterMs: options.retryAfterMs,
      call: (op) => this.redisCall(op),
    });
  }

  /** Builds the job's data from the estimate, or throws a typed error; writes nothing. */
  prepare(request: unknown, options: EnqueueOptions = {}): JobData {
    const req = parseMessagesRequest(request);
    return this.build(req, options, estimateCost(stripStream(req)));
  }

  /** Like {@link prepare}, counting input tokens with the provider when `exactCount` is set. */
  async prepareAsync(request: unknown, options: EnqueueOptions = {}): Promise<JobData> {
    const req = parseMessagesRequest(request);
    if (!options.exactCount) return this.build(req, options, estimateCost(stripStream(req)));
    return {
      ...this.build(req, options, estimateCost(stripStream(req), await this.countInputTokens(req))),
      inputCounted: true,
    };
  }

  /** Validates, costs and adds one request; resolves with the job id (the first job's id for a repeated idempotency key). */
  async enqueue(request: unknown, options: EnqueueOptions = {}): Promise<string> {
    return (await this.enqueueJob(request, options)).id;
  }

  /** {@link enqueue}, telling also whether a job was created or an existing one was found. */
  async enqueueJob(request: unknown, options: EnqueueOptions = {}): Promise<EnqueuedJob> {
    if (options.via === 'batches') checkBatchable(request, options);
    const data = await this.prepareAsync(request, options);
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
    const { span, data: traced } = startEnqueueSpan(id, data, options.traceparent);
    try {
      const [exists] = await this.gate.reserveOrWait([id], data.tenant, options);
      if (exists) {
        endEnqueueSpan(span, undefined, false);
        return { id, created: false };
      }
      try {
        await this.redisCall(() =>
          this.queue.add(JOB_NAME, traced, { ...this.jobOptions(data, attempts), jobId: id }),
        );
      } finally {
        await this.gate.release([id], data.tenant).catch(() => {});
      }
    } catch (err) {
      endEnqueueSpan(span, err);
      throw err;
    }
    endEnqueueSpan(span);
    return { id, created: true };
  }

  /**
   * Adds a map-reduce (see {@link MapReduceRequest}) as one BullMQ flow, all or nothing. The
   * combine job reserves, before its parts have answered, an upper bound: its template plus
   * every part's max_tokens. With an idempotency key every id is derived from it (the parts'
   * from `<key>:part-<i>`), and a key whose combine job exists adds nothing. Resolves with the
   * combine job's id, the one to wait for. Parts via batches skip the depth bound.
   */
  async enqueueMapReduce(
    flow: MapReduceRequest,
    options: EnqueueOptions = {},
  ): Promise<EnqueuedFlow> {
    const batches = options.via === 'batches';
    const key = options.idempotencyKey;
    const attempts = checkAttempts(options.attempts);
    if (flow.parts.length === 0) {
      throw new RequestValidationError([
        { field: 'parts', message: 'must hold at least one request' },
      ]);
    }
    const parts = flow.parts.map((r, i) => {
      try {
        if (batches) checkBatchable(r, options);
        const data = this.prepare(r, {
          ...options,
          ...(key ? { idempotencyKey: partKey(key, i) } : {}),
        });
        return batches && options.deadlineAt !== undefined
          ? { ...data, deadlineAt: options.deadlineAt }
          : data;
      } catch (err) {
        if (!(err instanceof RequestValidationError)) throw err;
        throw new RequestValidationError(
          err.issues.map((s) => ({ field: `parts.${i}.${s.field}`, message: s.message })),
        );
      }
    });
    const template = parseMessagesRequest(flow.combine);
    const tenant = parts[0]?.tenant;
    const id = key !== undefined ? jobIdForKey(key, tenant) : newJobId();
    const partIds = parts.map((_, i) =>
      key !== undefined ? jobIdForKey(partKey(key, i), tenant) : newJobId(),
    );
    const combine: JobData = {
      ...this.build(
        template,
        { ...options, via: 'messages' },
        {
          ...estimateCost(template),
          inputTokens: combineInputTokens(
            template,
            parts.map((p) => p.request.max_tokens),
          ),
        },
      ),
      combine: { parts: partIds },
    };
    await this.ensureRegistered();
    if (await this.redisCall(() => this.queue.getJob(id))) return { id, partIds, created: false };
    // Parts via messages wait in the queue: they take room under the depth bound.
    const room = batches ? [] : partIds;
    const bound = this.gate.largestChunk(tenant);
    if (room.length > bound) {
      throw new RequestValidationError([
        {
          field: 'parts',
          message: `holds ${room.length} requests, more than the queue's depth bound (${bound}) lets in at once: use fewer, larger parts or raise the bound`,
        },
      ]);
    }
    await this.gate.reserveOrWait(room, tenant, options);
    this.flows ??= new FlowProducer({ connection: this.redis, prefix: bullPrefix(this.names) });
    const flows = this.flows;
    try {
      await this.redisCall(() =>
        flows.add(
          mapReduceFlow({
            names: this.names,
            id,
            combine,
            partIds,
            parts,
            batches,
            jobOptions: (d) => this.jobOptions(d, attempts),
          }),
        ),
      );
    } finally {
      await this.gate.release(room, tenant).catch(() => {});
    }
    return { id, partIds, created: true };
  }

  /**
   * Adds many requests with BullMQ's addBulk, in chunks. Every request is validated (and costed)
   * before anything is written: one bad request adds nothing, and the error names it
   * (`3.max_tokens`). Under a depth bound each chunk is all or nothing: it is added whole once
   * the whole chunk fits (with `wait`), or not at all (QueueFullError; earlier chunks stay added
   * and were reported to `onChunk`). A Redis failure in the middle of a chunk can leave part of
   * that chunk added, each job whole; with idempotency keys a retry adds only the rest.
   * Resolves with one id per request, in order.
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
    const datas: JobData[] = [];
    for (let i = 0; i < requests.length; i++) {
      try {
        datas.push(
          options.exactCount
            ? await this.prepareAsync(requests[i], options)
            : this.prepare(requests[i], options),
        );
      } catch (err) {
        if (err instanceof RequestValidationError) {
          throw new RequestValidationError(
            err.issues.map((s) => ({ field: `${i}.${s.field}`, message: s.message })),
          );
        }
        throw err;
      }
    }
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
    for (let start = 0; start < ids.length; start += size) {
      const chunkIds = ids.slice(start, start + size);
      const first = new Map<string, number>();
      chunkIds.forEach((id, j) => {
        if (!first.has(id)) first.set(id, start + j);
      });
      const unique = [...first.keys()];
      const existing = await this.gate.reserveOrWait(unique, tenant, options);
      const fresh = unique.filter((_, j) => !existing[j]);
      const started = fresh.map((id) =>
        startEnqueueSpan(id, datas[first.get(id)!]!, options.traceparent),
      );
      let failed: unknown;
      try {
        if (fresh.length > 0) {
          await this.redisCall(() =>
            this.queue.addBulk(
              fresh.map((id, j) => {
                const data = started[j]!.data;
                return {
                  name: JOB_NAME,
                  data,
                  opts: { ...this.jobOptions(data, attempts), jobId: id },
                };
              }),
            ),
          );
        }
      } catch (err) {
        failed = err;
        throw err;
      } finally {
        for (const { span } of started) endEnqueueSpan(span, failed);
        await this.gate.release(fresh, tenant).catch(() => {});
      }
      options.onChunk?.(chunkIds, start);
    }
    return ids;
  }

  /** Resolves with a job's result; rejects with JobFailedError (the dead letter's reason), JobNotFoundError or WaitTimeoutError. */
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

  /** A job's state and, once finished, its result or failure (batch-bound jobs too); null when there is no such job. */
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
   */
  async cancel(id: string): Promise<'cancelled' | 'not_found' | 'active' | 'completed' | 'failed'> {
    for (let tries = 0; tries < 3; tries++) {
      if (await this.gate.takeWaiting(id)) {
        await this.redisCall(() => this.queue.remove(id));
        return 'cancelled';
      }
      const status = await this.status(id);
      if (!status) return 'not_found';
      if (status.state === 'active' || status.state === 'completed' || status.state === 'failed')
        return status.state;
      // It moved between the two reads (a retry came back to waiting): try again.
    }
    return 'active';
  }

  /** The batch-bound jobs of this queue (opened on first use). */
  get batchJobs(): BatchJobs {
    this.batches ??= new BatchJobs(this.redis, this.names, this.deadLetters);
    return this.batches;
  }

  async close(): Promise<void> {
    await this.waiter?.close();
    await this.batches?.close();
    await this.flows?.close();
    await Promise.all([this.queue.close(), this.deadLetters.close()]);
    if (this.ownsRedis) await this.redis.quit().catch(() => this.redis.disconnect());
  }

  private build(req: MessagesRequest, options: EnqueueOptions, cost: Cost): JobData {
    const tenant = options.tenant;
    if (tenant !== undefined && !TENANT.test(tenant)) {
      throw new RequestValidationError([
        {
          field: 'tenant',
          message: `must be 1 to 100 letters, digits, "_", ".", "@" or "-" (got ${JSON.stringify(tenant)})`,
        },
      ]);
    }
    let priority: number;
    try {
      priority = resolvePriority(options.priority);
    } catch (err) {
      throw new RequestValidationError([
        { field: 'priority', message: (err as Error).message.replace(/^priority /, '') },
      ]);
    }
    if (options.idempotencyKey !== undefined)
      checkIdempotencyKey(options.idempotencyKey, 'idempotencyKey');
    if (
      options.timeoutMs !== undefined &&
      !(Number.isInteger(options.timeoutMs) && options.timeoutMs >= 1_000)
    ) {
      throw new RequestValidationError([
        {
          field: 'timeoutMs',
          message: `must be a whole number of ms from 1000 up (got ${JSON.stringify(options.timeoutMs)})`,
        },
      ]);
    }
    checkMeta(options.meta);
    checkProviderHeaders(options.providerHeaders);
    const scopes = tenant ? [`tenant:${tenant}`] : [];
    const modelScope = modelScopeOf(this.models.patterns, req.model, this.models.strict);
    if (modelScope) scopes.push(modelScope);
    // Message Batches run outside the per-minute limits; the model's context still bounds them.
    if (options.via === 'batches') refuseOverContext(req.model, cost);
    else this.refuseNeverFits(cost, scopes);
    if (this.ledger) {
      const over = this.ledger.neverFits(
        tenant,
        worstCaseMicros(this.ledger.settings, req.model, cost),
      );
      if (over) throw over;
    }
    return {
      v: 1,
      request: stripStream(req),
      cost,
      priority,
      tenant,
      scopes: scopes.length > 0 ? scopes : undefined,
      stream: options.relayEvents ? true : (options.stream ?? req.stream),
      relayEvents: options.relayEvents || undefined,
      providerHeaders: options.providerHeaders,
      timeoutMs: options.timeoutMs,
      idempotencyKey: options.idempotencyKey,
      enqueuedAt: Date.now(),
      meta: options.meta,
    };
  }

  /** Under the `refuse` policy, a job whose budget is spent is refused with budget_exhausted. */
  private async refuseSpent(datas: readonly JobData[]): Promise<void> {
    const l = this.ledger;
    if (l === undefined || l.settings.policy !== 'refuse') return;
    for (const d of datas) {
      const micros = worstCaseMicros(l.settings, d.request.model, d.cost);
      const over = await this.redisCall(() => l.noRoom(d.tenant, micros));
      if (over) throw over;
    }
  }

  /** The limiter refuses what exceeds a limit less its headroom at once; so does the producer. */
  private refuseNeverFits(cost: Cost, scopes: readonly string[]): void {
    for (const scope of [GLOBAL_SCOPE, ...scopes]) {
      const limits = scope === GLOBAL_SCOPE ? this.limits : (this.scopeLimits[scope] ?? {});
      for (const dim of DIMENSION_NAMES) {
        const raw = limits[dim];
        if (raw === undefined || raw <= 0) continue;
        const limit = Math.max(1, Math.floor(raw * (1 - this.headroom)));
        const need = amountOf(cost, dim);
        if (need > limit) throw new CostExceedsLimitError(scope, dim, need, limit);
      }
    }
  }

  private async countInputTokens(req: MessagesRequest): Promise<number> {
    if (!this.tokenCounter) {
      throw new TypeError(
        'exactCount needs a tokenCounter (an Anthropic client) in the producer options',
      );
    }
    const { model, messages, system, tools, tool_choice, thinking } = req as MessagesRequest &
      Record<string, unknown>;
    const params = Object.fromEntries(
      Object.entries({ model, messages, system, tools, tool_choice, thinking }).filter(
        ([, v]) => v !== undefined,
      ),
    );
    const counted = await this.tokenCounter.messages.countTokens(params as never);
    return counted.input_tokens;
  }

  private jobOptions(data: JobData, attempts: number) {
    return {
      priority: data.priority,
      attempts,
      removeOnComplete: { age: this.retention.completedS, count: this.retention.completedCount },
      removeOnFail: { age: this.retention.failedS },
    };
  }

  private async ensureRegistered(): Promise<void> {
    if (this.registered) return;
    await this.redisCall(() => registerQueue(this.redis, this.names));
    this.registered = true;
  }

  private redisCall<T>(op: () => Promise<T>): Promise<T> {
    return withRedis(this.redisUrl, this.commandTimeoutMs, op);
  }
}

function stripStream(req: MessagesRequest): MessagesRequest {
  const { stream: _ignored, ...clean } = req;
  return clean as MessagesRequest;
}

function refuseOverContext(model: string, cost: Cost): void {
  const need = cost.inputTokens + cost.outputTokens;
  const context = contextTokensOf(model);
  if (need <= context) return;
  throw new RequestValidationError([
    {
      field: 'messages',
      message: `the request needs an estimated ${need} tokens (input and max_tokens), more than the model's context of ${context}: shorten the input, lower max_tokens, or split it (llmq batch summarize --chunk-tokens)`,
    },
  ]);
}

function checkAttempts(n: number | undefined): number {
  if (n === undefined) return 5;
  if (!Number.isInteger(n) || n < 1 || n > 100) {
    throw new RequestValidationError([
      {
        field: 'attempts',
        message: `must be a whole number from 1 to 100 (got ${JSON.stringify(n)})`,
      },
    ]);
  }
  return n;
}

function checkChunk(n: number | undefined): number {
  if (n === undefined) return 1_000;
  if (!Number.isInteger(n) || n < 1 || n > 100_000) {
    throw new TypeError(
      `chunkSize must be a whole number from 1 to 100000, got ${JSON.stringify(n)}`,
    );
  }
  return n;
}

const PROVIDER_HEADERS = new Set(['anthropic-version', 'anthropic-beta']);

function checkProviderHeaders(headers: Readonly<Record<string, string>> | undefined): void {
  for (const [name, value] of Object.entries(headers ?? {})) {
    if (!PROVIDER_HEADERS.has(name)) {
      throw new RequestValidationError([
        {
          field: name,
          message: 'is not a header llmq sends on (only anthropic-version and anthropic-beta)',
        },
      ]);
    }
    if (typeof value !== 'string' || !/^[\x21-\x7e]([\x20-\x7e]{0,254}[\x21-\x7e])?$/.test(value)) {
      throw new RequestValidationError([
        {
          field: name,
          message: `must be 1 to 256 printable characters (got ${JSON.stringify(value)?.slice(0, 60)})`,
        },
      ]);
    }
  }
}

function checkMeta(meta: unknown): void {
  if (meta === undefined) return;
  const bad = (message: string) => new RequestValidationError([{ field: 'meta', message }]);
  if (meta === null || typeof meta !== 'object' || Array.isArray(meta)) {
    throw bad(`must be an object of strings (got ${JSON.stringify(meta)})`);
  }
  const entries = Object.entries(meta);
  if (entries.length > 50) throw bad(`must hold at most 50 labels (got ${entries.length})`);
  for (const [k, v] of entries) {
    if (typeof v !== 'string' || v.length > 4_096 || k.length > 100) {
      throw new RequestValidationError([
        {
          field: `meta.${k}`,
          message: `must be a string of at most 4096 characters (got ${JSON.stringify(v)?.slice(0, 60)})`,
        },
      ]);
    }
  }
}
