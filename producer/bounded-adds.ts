/**
 * Adding jobs under the queue's depth bound, the producer's three ways (one job, chunks of
 * many, a map-reduce flow): reserve room, add, then release the reservations, added or not.
 */
import type { FlowProducer } from 'bullmq';
import { RequestValidationError } from '../shared/errors.ts';
import { JOB_NAME, type JobData } from '../shared/job.ts';
import type { QueueNames } from '../shared/keys.ts';
import type { LlmqQueue } from '../shared/queues.ts';
import { endEnqueueSpan, startEnqueueSpan } from '../shared/telemetry/job-spans.ts';
import type { DepthGate } from './depth-gate.ts';
import { type BuiltMapReduce, type EnqueuedFlow, mapReduceFlow } from './flows.ts';
import { refuseOtherRequest } from './idempotency.ts';
import type { EnqueuedJob, EnqueueManyOptions, EnqueueOptions } from './producer-options.ts';

/** What adding needs of the producer: its queue and depth gate, Redis under its deadline. */
export interface AddContext {
  readonly names: QueueNames;
  readonly queue: LlmqQueue;
  readonly gate: DepthGate;
  /** Runs a Redis operation under the producer's deadline (RedisUnavailableError). */
  call<T>(op: () => Promise<T>): Promise<T>;
  /** A job's BullMQ options: its priority, attempts and retention. */
  jobOptions(data: JobData, attempts: number): Record<string, unknown>;
}

/** Adds one job under id `id`, unless a job has that id already (then `created` is false). */
export async function addOne(
  ctx: AddContext,
  id: string,
  data: JobData,
  attempts: number,
  options: EnqueueOptions,
): Promise<EnqueuedJob> {
  const { span, data: traced } = startEnqueueSpan(id, data, options.traceparent);
  try {
    const bytes = ctx.gate.weigh([traced], data.tenant);
    const [exists] = await ctx.gate.reserveOrWait([id], data.tenant, options, bytes);
    if (exists) {
      refuseOtherRequest(id, await ctx.call(() => ctx.queue.getJob(id)), data.digest);
      endEnqueueSpan(span, undefined, false);
      return { id, created: false };
    }
    let added = false;
    try {
      await ctx.call(() =>
        ctx.queue.add(JOB_NAME, traced, { ...ctx.jobOptions(data, attempts), jobId: id }),
      );
      added = true;
    } finally {
      await ctx.gate.release([id], data.tenant, added).catch(() => {});
    }
  } catch (err) {
    endEnqueueSpan(span, err);
    throw err;
  }
  endEnqueueSpan(span);
  return { id, created: true };
}

/** Throws IdempotencyConflictError when a job already under one of `ids` holds another request. */
async function refuseOtherRequests(
  ctx: AddContext,
  ids: readonly string[],
  datas: readonly JobData[],
  first: ReadonlyMap<string, number>,
): Promise<void> {
  for (const id of ids) {
    const job = await ctx.call(() => ctx.queue.getJob(id));
    refuseOtherRequest(id, job, datas[first.get(id)!]!.digest);
  }
}

/**
 * Adds `datas` under `ids` with addBulk, `size` at a time: each chunk is added whole once it
 * fits under the bound, or not at all; an id repeated in a chunk is added once, and one that
 * exists already is left as it is (unless it holds another request: IdempotencyConflictError,
 * and that chunk is not added). `onChunk` hears of each chunk once it is in.
 */
export async function addInChunks(
  ctx: AddContext,
  ids: readonly string[],
  datas: readonly JobData[],
  size: number,
  attempts: number,
  options: EnqueueManyOptions,
): Promise<void> {
  const tenant = datas[0]?.tenant;
  for (let start = 0; start < ids.length; start += size) {
    const chunkIds = ids.slice(start, start + size);
    const first = new Map<string, number>();
    chunkIds.forEach((id, j) => {
      if (!first.has(id)) first.set(id, start + j);
      // One key given twice in a call must name one request.
      else refuseOtherRequest(id, { data: datas[first.get(id)!] }, datas[start + j]!.digest);
    });
    const unique = [...first.keys()];
    const weights = ctx.gate.weigh(
      unique.map((id) => datas[first.get(id)!]),
      tenant,
    );
    const existing = await ctx.gate.reserveOrWait(unique, tenant, options, weights);
    const fresh = unique.filter((_, j) => !existing[j]);
    const started = fresh.map((id) =>
      startEnqueueSpan(id, datas[first.get(id)!]!, options.traceparent),
    );
    let failed: unknown;
    try {
      await refuseOtherRequests(
        ctx,
        unique.filter((_, j) => existing[j]),
        datas,
        first,
      );
      if (fresh.length > 0) {
        await ctx.call(() =>
          ctx.queue.addBulk(
            fresh.map((id, j) => {
              const data = started[j]!.data;
              return {
                name: JOB_NAME,
                data,
                opts: { ...ctx.jobOptions(data, attempts), jobId: id },
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
      await ctx.gate.release(fresh, tenant).catch(() => {});
    }
    options.onChunk?.(chunkIds, start);
  }
}

/**
 * Adds a built map-reduce as one flow. Its parts via messages wait in the queue, so they take
 * room under the bound (all at once: more than the bound lets in is refused); via batches they
 * skip it.
 */
export async function addMapReduce(
  ctx: AddContext,
  flows: FlowProducer,
  built: BuiltMapReduce,
  attempts: number,
  options: EnqueueOptions,
): Promise<EnqueuedFlow> {
  const batches = options.via === 'batches';
  const { id, partIds, parts, combine, tenant } = built;
  const room = batches ? [] : partIds;
  const bound = ctx.gate.largestChunk(tenant);
  if (room.length > bound) {
    throw new RequestValidationError([
      {
        field: 'parts',
        message: `holds ${room.length} requests, more than the queue's depth bound (${bound}) lets in at once: use fewer, larger parts or raise the bound`,
      },
    ]);
  }
  await ctx.gate.reserveOrWait(room, tenant, options, batches ? [] : ctx.gate.weigh(parts, tenant));
  let added = false;
  try {
    await ctx.call(() =>
      flows.add(
        mapReduceFlow({
          names: ctx.names,
          id,
          combine,
          partIds,
          parts,
          batches,
          jobOptions: (d) => ctx.jobOptions(d, attempts),
        }),
      ),
    );
    added = true;
  } finally {
    await ctx.gate.release(room, tenant, added).catch(() => {});
  }
  return { id, partIds, created: true };
}
