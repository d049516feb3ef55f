import { randomUUID } from 'node:crypto';
import type Anthropic from '@anthropic-ai/sdk';
import { type Job, Worker } from 'bullmq';
import { BATCH_ROOM_MS } from '../../shared/batch-via.ts';
import type { JobData, JobResult } from '../../shared/job.ts';
import { bullPrefix, type QueueNames } from '../../shared/keys.ts';
import { batchSavingUsd } from '../../shared/prices.ts';
import {
  batchNames,
  type LlmqQueue,
  openBatchQueue,
  openDeadLetterQueue,
  openQueue,
} from '../../shared/queues.ts';
import type { RedisClient } from '../../shared/redis.ts';
import { readStoredResult } from '../../shared/result-codec.ts';
import { completeJob, type ResultBounds } from '../bullmq-internals.ts';
import type { DeadLetterBounds } from '../dead-letter-bounds.ts';
import { deadLetter } from '../dead-letters.ts';
import { store } from '../provider.ts';
import {
  type BatchDeployment,
  type BatchesClient,
  batchGroups,
  routeBatchJobs,
} from './batch-deployments.ts';

export type { BatchesClient } from './batch-deployments.ts';

import { BatchState, type BatchTotals, type InFlight } from './batch-state.ts';
import { type BatchItem, itemOutcome } from './item-outcome.ts';

export interface BatchSubmitterOptions {
  readonly redis: RedisClient;
  readonly names: QueueNames;
  /** The one client, without a pool; unused when `deployments` are given. */
  readonly client?: BatchesClient;
  /**
   * A pool's deployments taking Message Batches, best first: a pinned job's batch goes to its
   * pin, the others' to the first; with none (or a pin elsewhere) a batch job is dead-lettered
   * with the reason. Each job's result names its deployment. @default undefined (no pool)
   */
  readonly deployments?: readonly BatchDeployment[] | undefined;
  /** First wait before polling a batch again, doubled each poll up to `maxPollMs`. @default 1_000 */
  readonly pollMs?: number;
  /** @default 60_000 */
  readonly maxPollMs?: number;
  /** A batch is sent once no new job came for this long (or it is full). @default 500 */
  readonly gatherMs?: number;
  /** Most requests in one batch (the provider's limit is 100,000). @default 100_000 */
  readonly maxRequests?: number;
  /** Most bytes of requests in one batch (the provider's limit is 256 MB). @default 200 MB */
  readonly maxBytes?: number;
  /** How often the loop looks for new jobs, ms. @default 200 */
  readonly tickMs?: number;
  /** Called after each step that changed something. */
  readonly onProgress?: (p: BatchProgress) => void;
  /** Called with errors the loop survives (the provider or Redis failing for a while). */
  readonly onError?: (err: unknown) => void;
  /** What the queue's dead letters may hold. @default DEFAULT_DEAD_LETTER_BOUNDS */
  readonly deadLetterBounds?: DeadLetterBounds | undefined;
  /** What the queue's finished jobs may hold. @default DEFAULT_RESULT_BOUNDS */
  readonly resultBounds?: ResultBounds | undefined;
}

/** What progress shows: batches and items now, and the queue's totals. */
export interface BatchProgress {
  readonly batchesInFlight: number;
  readonly itemsProcessing: number;
  readonly totals: BatchTotals;
}

/** A running submitter: `stop()` ends its loop (batches in flight stay in Redis, by id). */
export interface BatchSubmitterHandle {
  stop(): Promise<void>;
  /** Resolves when the loop ended. */
  readonly done: Promise<void>;
}

const LEASE_MS = 5_000;
/** Jobs stay active while their batch runs; this token finishes them without a lock. */
const NO_LOCK = '0';

/**
 * The batch submitter of a queue: takes the jobs waiting in `<queue>-batches`, groups them into
 * Message Batches within the size limits, submits them and keeps each batch id with its jobs in
 * Redis, polls each batch with backoff, and applies its results: a succeeded item completes its
 * job with the same result shape as a call through `messages`; errored, expired and canceled
 * items are retried or dead-lettered (see item-outcome.ts). Resumable: a new submitter polls the
 * batches in flight by id, and submits only the jobs taken but not yet in a batch.
 */
export class BatchSubmitter {
  private readonly redis: RedisClient;
  private readonly names: QueueNames;
  private readonly state: BatchState;
  private readonly queue;
  private readonly dlq;
  /** The queue's `messages` jobs, for jobs handed over past their deadline. */
  private readonly messages: LlmqQueue;
  private readonly taker: Worker<JobData, JobResult>;
  private readonly owner = `submitter-${randomUUID()}`;
  private readonly o: Required<
    Pick<
      BatchSubmitterOptions,
      'pollMs' | 'maxPollMs' | 'gatherMs' | 'maxRequests' | 'maxBytes' | 'tickMs'
    >
  >;
  private readonly polls = new Map<string, { at: number; delayMs: number }>();
  private lastTakenAt = 0;
  private stopped = false;
  private wake: (() => void) | undefined;

  constructor(private readonly options: BatchSubmitterOptions) {
    this.redis = options.redis;
    this.names = options.names;
    if (!options.client && !options.deployments)
      throw new TypeError("startBatchSubmitter needs a `client`, or the pool's `deployments`");
    this.state = new BatchState(this.redis, this.names);
    this.queue = openBatchQueue(this.redis, this.names);
    this.dlq = openDeadLetterQueue(this.redis, this.names);
    this.dlq.on('error', () => {});
    this.messages = openQueue(this.redis, this.names);
    this.messages.on('error', () => {});
    const b = batchNames(this.names);
    this.taker = new Worker<JobData, JobResult>(b.queue, null, {
      connection: this.redis, // duplicated by BullMQ for its blocking reads
      prefix: bullPrefix(b),
      autorun: false,
    });
    this.taker.on('error', () => {});
    this.o = {
      pollMs: options.pollMs ?? 1_000,
      maxPollMs: options.maxPollMs ?? 60_000,
      gatherMs: options.gatherMs ?? 500,
      maxRequests: options.maxRequests ?? 100_000,
      maxBytes: options.maxBytes ?? 200 * 1024 * 1024,
      tickMs: options.tickMs ?? 200,
    };
  }

  /** Runs until {@link stop}. */
  async run(): Promise<void> {
    try {
      while (!this.stopped) {
        try {
          if (await this.state.holdLease(this.owner, LEASE_MS)) {
            const changed =
              (await this.take()) +
              (await this.submit()) +
              (await this.poll()) +
              (await this.settleHandoffs());
            if (changed > 0) await this.report();
          }
        } catch (err) {
          if (!this.stopped) this.options.onError?.(err);
        }
        await this.sleep(this.o.tickMs);
      }
    } finally {
      await this.state.releaseLease(this.owner).catch(() => {});
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.wake?.();
  }

  async close(): Promise<void> {
    await this.stop();
    await Promise.all([
      this.taker.close(true),
      this.queue.close(),
      this.dlq.close(),
      this.messages.close(),
    ]);
  }

  /** Batches and items now, and the totals. */
  async progress(): Promise<BatchProgress> {
    const inflight = await this.state.inFlight();
    return {
      batchesInFlight: inflight.length,
      itemsProcessing: inflight.reduce((n, b) => n + b.jobIds.length, 0),
      totals: await this.state.totals(),
    };
  }

  private async report(): Promise<void> {
    if (this.options.onProgress) this.options.onProgress(await this.progress());
  }

  /** Moves waiting jobs to active (taken by this submitter); resolves with how many. */
  private async take(): Promise<number> {
    let n = 0;
    while (n < this.o.maxRequests && !this.stopped) {
      const job = await this.taker.getNextJob(this.owner, { block: false });
      if (!job) break;
      n++;
    }
    if (n > 0) this.lastTakenAt = Date.now();
    return n;
  }

  /**
   * Submits the taken jobs that are in no batch yet (this run's, or a killed run's) once no new
   * job came for `gatherMs`, in batches within the limits. The batch id is written right after
   * the provider accepted it; only a crash between the two submits the same jobs again.
   */
  private async submit(): Promise<number> {
    if (Date.now() - this.lastTakenAt < this.o.gatherMs) return 0;
    const inflight = await this.state.inFlight();
    const inBatch = new Set([
      ...inflight.flatMap((b) => b.jobIds),
      ...(await this.state.handoffs()),
    ]);
    const active = (await this.queue.getJobs(['active'], 0, -1, true)).filter(
      (j): j is Job<JobData, JobResult> => Boolean(j) && !inBatch.has(j.id!),
    );
    const routes = routeBatchJobs(active, this.options.deployments);
    for (const { job, reason } of routes.refused) {
      await deadLetter(
        this.dlq,
        job,
        NO_LOCK,
        { reason, errorClass: 'DeploymentNotFoundError' },
        job.data.history ?? [],
        this.options.deadLetterBounds,
      );
      await this.state.count('deadLettered');
    }
    let sent = routes.refused.length;
    for (const { deployment, jobs } of routes.destinations) {
      for (const group of batchGroups(jobs, this.o.maxRequests, this.o.maxBytes)) {
        if (this.stopped) return sent;
        await this.send(group, deployment);
        sent += group.length;
      }
    }
    return sent;
  }

  /** The client of a batch's deployment (the one client without a pool). */
  private clientOf(deployment: string | undefined): BatchesClient {
    if (deployment === undefined && this.options.client) return this.options.client;
    const d = this.options.deployments?.find((x) => x.name === deployment);
    if (d) return d.client;
    throw new Error(
      `a batch was submitted to deployment ${JSON.stringify(deployment ?? 'default')}, which this submitter's config lacks (or takes no batches): run it with that deployment to collect the batch`,
    );
  }

  /** Sends one group as a batch to its deployment, and records it. */
  private async send(group: readonly Job<JobData, JobResult>[], deployment?: string) {
    const batch = await this.clientOf(deployment).messages.batches.create({
      requests: group.map((j) => ({
        custom_id: j.id!,
        params: j.data.request as unknown as Anthropic.MessageCreateParamsNonStreaming,
      })),
    });
    await this.state.submitted({
      batchId: batch.id,
      jobIds: group.map((j) => j.id!),
      submittedAt: Date.now(),
      ...(deployment !== undefined ? { deployment } : {}),
    });
    this.polls.set(batch.id, { at: Date.now() + this.o.pollMs, delayMs: this.o.pollMs });
  }

  /** Polls each batch that is due (a resumed one at once); applies the results of ended ones. */
  private async poll(): Promise<number> {
    let changed = 0;
    const now = Date.now();
    for (const b of await this.state.inFlight()) {
      if (this.stopped) break;
      const due = this.polls.get(b.batchId) ?? { at: now, delayMs: this.o.pollMs };
      if (due.at > now) continue;
      const batch = await this.clientOf(b.deployment).messages.batches.retrieve(b.batchId);
      if (batch.processing_status !== 'ended') {
        const delayMs = Math.min(due.delayMs * 2, this.o.maxPollMs);
        this.polls.set(b.batchId, { at: Date.now() + due.delayMs, delayMs });
        continue;
      }
      await this.collect(b);
      changed++;
    }
    return changed;
  }

  /** Streams an ended batch's results and settles each job still waiting on it. */
  private async collect(b: InFlight): Promise<void> {
    const client = this.clientOf(b.deployment);
    for await (const item of await client.messages.batches.results(b.batchId)) {
      if (this.stopped) return;
      await this.apply(b, item);
    }
    await this.state.ended(b.batchId);
    this.polls.delete(b.batchId);
  }

  private async apply(b: InFlight, item: BatchItem): Promise<void> {
    const { batchId, deployment } = b;
    const where = deployment !== undefined ? { deployment } : {};
    const job = (await this.queue.getJob(item.custom_id)) as Job<JobData, JobResult> | undefined;
    // Applied already (a run killed while collecting), or removed meanwhile.
    if (!job || (await job.getState()) !== 'active') return;
    const now = Date.now();
    const history = [...(job.data.history ?? [])];
    const used = history.filter((a) => a.counted).length;
    const outcome = itemOutcome(item, used, job.opts.attempts ?? 5, now);
    if (outcome.kind === 'complete') {
      const message = store(outcome.message);
      history.push({ at: now, outcome: 'ok', counted: true, ...where });
      const result: JobResult = {
        message,
        latencyMs: now - (job.timestamp ?? now),
        requestId: null,
        attempts: used + 1,
        completedAt: now,
        batchId,
        ...where,
      };
      await job.updateData({ ...job.data, history });
      await completeJob(this.redis, job, result, NO_LOCK, false, this.options.resultBounds);
      await this.state.count('succeeded', batchSavingUsd(message.model, message.usage));
      return;
    }
    history.push({ ...outcome.record, ...where });
    const kind =
      item.result.type === 'expired'
        ? 'expired'
        : item.result.type === 'canceled'
          ? 'canceled'
          : 'errored';
    await this.state.count(kind);
    if (outcome.kind === 'dead') {
      await deadLetter(
        this.dlq,
        job,
        NO_LOCK,
        outcome.cause,
        history,
        this.options.deadLetterBounds,
      );
      await this.state.count('deadLettered');
      return;
    }
    const deadline = job.data.deadlineAt;
    if (deadline !== undefined && now + BATCH_ROOM_MS > deadline) {
      await this.handOff(job, history);
      return;
    }
    // Back as new work: the next batch takes it.
    await job.updateData({ ...job.data, history });
    await job.moveToDelayed(Date.now(), NO_LOCK);
    await this.state.count('retried');
  }

  /**
   * Past its deadline a job goes through `messages`: a job under the same id in the queue the
   * workers read (so the dead letter, if any, is the same), recorded before it is added; its
   * outcome settles the batch-bound job (see {@link settleHandoffs}).
   */
  private async handOff(job: Job<JobData, JobResult>, history: JobData['history']): Promise<void> {
    const data: JobData = { ...job.data, history };
    await job.updateData(data);
    await this.state.handedOff(job.id!);
    await this.messages.add(job.name, data, {
      jobId: job.id!,
      priority: data.priority,
      attempts: job.opts.attempts ?? 5,
      removeOnComplete: job.opts.removeOnComplete ?? true,
      removeOnFail: job.opts.removeOnFail ?? true,
    });
  }

  /** Completes (or fails) each handed-off job once its `messages` job finished. */
  private async settleHandoffs(): Promise<number> {
    let n = 0;
    for (const id of await this.state.handoffs()) {
      const job = (await this.queue.getJob(id)) as Job<JobData, JobResult> | undefined;
      const state = await this.messages.getJobState(id);
      if (job && (await job.getState()) === 'active') {
        if (state === 'completed') {
          const done = await this.messages.getJob(id);
          await completeJob(
            this.redis,
            job,
            readStoredResult(done!.returnvalue),
            NO_LOCK,
            false,
            this.options.resultBounds,
          );
        } else if (state === 'failed' || state === 'unknown') {
          const letter = (await this.dlq.getJob(id))?.data;
          const reason = letter?.reason ?? 'its messages job was removed';
          await deadLetter(
            this.dlq,
            job,
            NO_LOCK,
            { ...letter, reason, errorClass: letter?.errorClass ?? 'HandoffLost' },
            letter?.attempts ?? job.data.history ?? [],
            this.options.deadLetterBounds,
          );
        } else continue;
      }
      await this.state.handoffSettled(id);
      n++;
    }
    return n;
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(done, ms);
      function done() {
        clearTimeout(t);
        resolve();
      }
      this.wake = done;
    });
  }
}

/** Starts a batch submitter's loop; `stop()` ends it and closes what it opened. */
export function startBatchSubmitter(options: BatchSubmitterOptions): BatchSubmitterHandle {
  const s = new BatchSubmitter(options);
  const done = s.run().finally(() => s.close());
  return {
    stop: async () => {
      await s.stop();
      await done;
    },
    done,
  };
}
