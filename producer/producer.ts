import { FlowProducer } from 'bullmq';
import type { Via } from '../shared/batch-via.ts';
import { BudgetLedger, worstCaseMicros } from '../shared/budgets.ts';
import { RedisOutOfMemoryError, RequestValidationError } from '../shared/errors.ts';
import { type LimitSet, readFleetLimits } from '../shared/fleet-limits.ts';
import { JOB_NAME, type JobData, type JobResult } from '../shared/job.ts';
import { ticketOf } from '../shared/job-ticket.ts';
import { bullPrefix, type QueueNames } from '../shared/keys.ts';
import {
  type DeadLetterQueue,
  type LlmqQueue,
  openDeadLetterQueue,
  openQueue,
  registerQueue,
} from '../shared/queues.ts';
import { describeRedis, type RedisClient, untilReady } from '../shared/redis.ts';
import { endEnqueueSpan, startEnqueueSpan } from '../shared/telemetry/job-spans.ts';
import { BatchJobs, checkBatchable } from './batches/batch-jobs.ts';
import { DepthGate } from './depth-gate.ts';
import { withRedis } from './errors.ts';
import {
  buildMapReduce,
  type EnqueuedFlow,
  type MapReduceRequest,
  mapReduceFlow,
} from './flows.ts';
import { jobIdForKey, newJobId } from './idempotency.ts';
import { checkAttempts, checkChunk, JobBuilder } from './job-builder.ts';
import { type JobStatus, readJobStatus } from './job-status.ts';
import type {
  EnqueuedJob,
  EnqueueManyOptions,
  EnqueueOptions,
  ProducerOptions,
} from './producer-options.ts';
import { ResultWaiter, type WaitOptions } from './result-waiter.ts';

export type {
  EnqueuedJob,
  EnqueueManyOptions,
  EnqueueOptions,
  ProducerOptions,
  TokenCounter,
} from './producer-options.ts';

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
  private readonly builder: JobBuilder;
  private readonly ledger: BudgetLedger | undefined;
  private readonly redisUrl: string;
  private readonly commandTimeoutMs: number;
  private readonly retention: { completedS: number; completedCount: number; failedS: number };
  private readonly ownsRedis: boolean;
  private readonly onOutOfMemory: ProducerOptions['onRedisOutOfMemory'];
  private waiter: ResultWaiter | undefined;
  private batches: BatchJobs | undefined;
  private flows: FlowProducer | undefined;
  private registered = false;
  /** When the fleet's limits were last read (ms), or undefined when they are not read at all. */
  private fleetReadAt: number | undefined;
  private readonly fleetMaxAgeMs: number;

  constructor(options: ProducerOptions) {
    this.redis = options.redis;
    this.ownsRedis = options.ownsRedis ?? false;
    this.onOutOfMemory = options.onRedisOutOfMemory;
    this.names = options.names;
    this.ledger =
      options.budgets && new BudgetLedger(options.redis, options.names, options.budgets);
    this.builder = new JobBuilder({
      limits: options.limits,
      scopes: options.scopes,
      modelsStrict: options.modelsStrict,
      headroom: options.headroom,
      ledger: this.ledger,
      tokenCounter: options.tokenCounter,
    });
    this.commandTimeoutMs = options.commandTimeoutMs ?? 10_000;
    this.fleetReadAt = options.fleetLimits === false ? undefined : Number.NEGATIVE_INFINITY;
    this.fleetMaxAgeMs = options.fleetLimitsMaxAgeMs ?? 1_000;
    this.retention = {
      completedS: options.keepCompletedS ?? 7 * DAY_S,
      completedCount: options.keepCompletedCount ?? 100_000,
      failedS: options.keepFailedS ?? 7 * DAY_S,
    };
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
  }

  /** Reads the fleet's stored limits unless read within `fleetLimitsMaxAgeMs` (or `force`): every enqueue does first. */
  async loadLimits(force = false): Promise<LimitSet> {
    const at = this.fleetReadAt;
    if (at !== undefined && (force || Date.now() - at >= this.fleetMaxAgeMs)) {
      const stored = await this.redisCall(() => readFleetLimits(this.redis, this.names));
      this.builder.useFleet(stored?.limits);
      this.fleetReadAt = Date.now();
    }
    return this.builder.limits;
  }

  /** The most input tokens a request may have to fit every limit it is charged to (see JobBuilder.inputRoom). */
  async inputRoom(model: string, maxTokens: number, tenant?: string): Promise<number> {
    await this.loadLimits();
    return this.builder.inputRoom(model, maxTokens, tenant);
  }

  /** Builds the job's data from the estimate (the fleet's limits as last read), or throws a typed error; writes nothing. */
  prepare(request: unknown, options: EnqueueOptions = {}): JobData {
    return this.builder.prepare(request, options);
  }

  /** Like {@link prepare}, counting input tokens with the provider when `exactCount` is set. */
  prepareAsync(request: unknown, options: EnqueueOptions = {}): Promise<JobData> {
    return this.builder.prepareAsync(request, options);
  }

  /** Validates, costs and adds one request; resolves with the job id (the first job's id for a repeated idempotency key). */
  async enqueue(request: unknown, options: EnqueueOptions = {}): Promise<string> {
    return (await this.enqueueJob(request, options)).id;
  }

  /** {@link enqueue}, telling also whether a job was created or an existing one was found. */
  async enqueueJob(request: unknown, options: EnqueueOptions = {}): Promise<EnqueuedJob> {
    if (options.via === 'batches') checkBatchable(request, options);
    await this.loadLimits();
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
      const bytes = this.gate.weigh([traced], data.tenant);
      const [exists] = await this.gate.reserveOrWait([id], data.tenant, options, bytes);
      if (exists) {
        endEnqueueSpan(span, undefined, false);
        return { id, created: false };
      }
      let added = false;
      try {
        await this.redisCall(() =>
          this.queue.add(JOB_NAME, traced, { ...this.jobOptions(data, attempts), jobId: id }),
        );
        added = true;
      } finally {
        await this.gate.release([id], data.tenant, added).catch(() => {});
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
    const attempts = checkAttempts(options.attempts);
    await this.loadLimits();
    const { id, partIds, parts, combine, tenant } = buildMapReduce(this.builder, flow, options);
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
    await this.gate.reserveOrWait(
      room,
      tenant,
      options,
      batches ? [] : this.gate.weigh(parts, tenant),
    );
    this.flows ??= new FlowProducer({ connection: this.redis, prefix: bullPrefix(this.names) });
    const flows = this.flows;
    let added = false;
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
      added = true;
    } finally {
      await this.gate.release(room, tenant, added).catch(() => {});
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
    await this.loadLimits();
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
    for (let start = 0; start < ids.length; start += size) {
      const chunkIds = ids.slice(start, start + size);
      const first = new Map<string, number>();
      chunkIds.forEach((id, j) => {
        if (!first.has(id)) first.set(id, start + j);
      });
      const unique = [...first.keys()];
      const weights = this.gate.weigh(
        unique.map((id) => datas[first.get(id)!]),
        tenant,
      );
      const existing = await this.gate.reserveOrWait(unique, tenant, options, weights);
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
        // A failed addBulk may have added part of the chunk: the counts stay (the bound's
        // pruning drops those of jobs that are not there).
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
    await this.finishStrandedCancels();
    for (let tries = 0; tries < 3; tries++) {
      if (await this.gate.takeWaiting(id)) {
        await this.removeCancelled(id);
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

  /**
   * Finishes cancels whose job was taken out but never removed (a producer that died between
   * the two steps, or a take-out that ran after its caller had given up on Redis).
   */
  async finishStrandedCancels(olderThanMs = 30_000): Promise<number> {
    const ids = await this.gate.strandedCancels(olderThanMs);
    for (const id of ids) await this.removeCancelled(id);
    return ids.length;
  }

  private async removeCancelled(id: string): Promise<void> {
    await this.redisCall(() => this.queue.remove(id));
    await this.gate.cancelled(id);
  }

  /** The batch-bound jobs of this queue (opened on first use). */
  get batchJobs(): BatchJobs {
    this.batches ??= new BatchJobs(this.redis, this.names, this.deadLetters);
    return this.batches;
  }

  /** Resolves once the Redis connection is ready (RedisUnavailableError after the command timeout). */
  async ready(): Promise<void> {
    await this.redisCall(() => untilReady(this.redis));
  }

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
      const micros = worstCaseMicros(l.settings, d.request.model, d.cost);
      const over = await this.redisCall(() => l.noRoom(d.tenant, micros));
      if (over) throw over;
    }
  }

  private jobOptions(data: JobData, attempts: number) {
    return {
      // What the gate schedules by, where the request cannot write (see shared/job-ticket.ts).
      llmq: ticketOf(data),
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

  private async redisCall<T>(op: () => Promise<T>): Promise<T> {
    try {
      return await withRedis(this.redisUrl, this.commandTimeoutMs, op);
    } catch (err) {
      if (err instanceof RedisOutOfMemoryError) this.onOutOfMemory?.(err);
      throw err;
    }
  }
}
