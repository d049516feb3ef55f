import type { FlowJob } from 'bullmq';
import { combineInputTokens } from '../shared/combine.ts';
import { RequestValidationError } from '../shared/errors.ts';
import { estimateCost } from '../shared/estimate.ts';
import { JOB_NAME, type JobData } from '../shared/job.ts';
import type { QueueNames } from '../shared/keys.ts';
import { bullPrefix } from '../shared/keys.ts';
import { batchNames } from '../shared/queues.ts';
import { parseMessagesRequest } from '../shared/request.ts';
import { checkBatchable } from './batches/batch-jobs.ts';
import { jobIdForKey, newJobId } from './idempotency.ts';
import type { JobBuilder } from './job-builder.ts';
import type { EnqueuedJob, EnqueueOptions } from './producer-options.ts';

/**
 * A map-reduce: part requests, each its own job (own budget, retries and dead letter), and a
 * combine request that runs once every part has completed, with their answers added to its last
 * user message in order (`<part n="1">…</part>`). Added as one BullMQ flow: the combine job is
 * the parent, in waiting-children until its parts complete.
 * @inline
 */
export interface MapReduceRequest {
  /** Messages requests, one job each. */
  readonly parts: readonly unknown[];
  /** A Messages request whose last user message gets the parts' answers. */
  readonly combine: unknown;
}

/**
 * What adding a map-reduce did: the combine job's id (the one to wait for) and its parts'.
 * @inline
 */
export interface EnqueuedFlow extends EnqueuedJob {
  readonly partIds: readonly string[];
}

/** The idempotency key of a map-reduce's part `i`, from the key of the whole. */
export const partKey = (key: string, i: number): string => `${key}:part-${i}`;

/**
 * The BullMQ flow of a map-reduce. Parts bound for Message Batches go to `<queue>-batches` (the
 * batch submitter runs them); the combine job always goes to the queue the workers read.
 */
export function mapReduceFlow(f: {
  readonly names: QueueNames;
  readonly id: string;
  readonly combine: JobData;
  readonly partIds: readonly string[];
  readonly parts: readonly JobData[];
  readonly batches: boolean;
  readonly jobOptions: (data: JobData) => Record<string, unknown>;
}): FlowJob {
  // Batch-bound jobs live under their own names (and hash tag): see batch-jobs.ts.
  const partNames = f.batches ? batchNames(f.names) : f.names;
  return {
    name: JOB_NAME,
    queueName: f.names.queue,
    data: f.combine,
    opts: { ...f.jobOptions(f.combine), jobId: f.id },
    children: f.parts.map((data, i) => ({
      name: JOB_NAME,
      queueName: partNames.queue,
      prefix: bullPrefix(partNames),
      data,
      opts: { ...f.jobOptions(data), jobId: f.partIds[i]! },
    })),
  };
}

/** A map-reduce's jobs, built and checked, nothing written: their ids and their data. */
export interface BuiltMapReduce {
  readonly id: string;
  readonly partIds: readonly string[];
  readonly parts: readonly JobData[];
  readonly combine: JobData;
  readonly tenant: string | undefined;
}

/**
 * Validates and costs every part (an error names it: `parts.2.max_tokens`) and the combine
 * job, which reserves its template plus every part's max_tokens; a part with a count (from
 * count_tokens, in `counts`) is reserved at it. With an idempotency key every id is derived
 * from it.
 */
export function buildMapReduce(
  builder: JobBuilder,
  flow: MapReduceRequest,
  options: EnqueueOptions,
  counts: readonly (number | undefined)[] = [],
): BuiltMapReduce {
  const batches = options.via === 'batches';
  const key = options.idempotencyKey;
  if (flow.parts.length === 0) {
    throw new RequestValidationError([
      { field: 'parts', message: 'must hold at least one request' },
    ]);
  }
  const parts = flow.parts.map((r, i) => {
    try {
      if (batches) checkBatchable(r, options);
      const partOptions = { ...options, ...(key ? { idempotencyKey: partKey(key, i) } : {}) };
      const counted = counts[i];
      const data =
        counted === undefined
          ? builder.prepare(r, partOptions)
          : builder.prepareCounted(r, partOptions, counted);
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
  const cost = {
    ...estimateCost(template),
    inputTokens: combineInputTokens(
      template,
      parts.map((p) => p.request.max_tokens),
    ),
  };
  const combine: JobData = {
    ...builder.build(template, { ...options, via: 'messages' }, cost),
    combine: { parts: partIds },
  };
  return { id, partIds, parts, combine, tenant };
}
