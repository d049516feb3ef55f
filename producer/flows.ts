import type { FlowJob } from 'bullmq';
import { JOB_NAME, type JobData } from '../shared/job.ts';
import type { QueueNames } from '../shared/keys.ts';
import { bullPrefix } from '../shared/keys.ts';
import { batchNames } from '../shared/queues.ts';
import type { EnqueuedJob } from './producer.ts';

/**
 * A map-reduce: part requests, each its own job (own budget, retries and dead letter), and a
 * combine request that runs once every part has completed, with their answers added to its last
 * user message in order (`<part n="1">…</part>`). Added as one BullMQ flow: the combine job is
 * the parent, in waiting-children until its parts complete.
 */
export interface MapReduceRequest {
  /** Messages requests, one job each. */
  readonly parts: readonly unknown[];
  /** A Messages request whose last user message gets the parts' answers. */
  readonly combine: unknown;
}

/** What adding a map-reduce did: the combine job's id (the one to wait for) and its parts'. */
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
