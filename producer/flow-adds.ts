import { FlowProducer } from 'bullmq';
import type { Via } from '../shared/batch-via.ts';
import { bullPrefix } from '../shared/keys.ts';
import type { LlmqQueue } from '../shared/queues.ts';
import type { RedisClient } from '../shared/redis.ts';
import { type AddContext, addMapReduce } from './bounded-adds.ts';
import type { Costing } from './costing.ts';
import {
  type BuiltMapReduce,
  buildMapReduce,
  type EnqueuedFlow,
  type MapReduceRequest,
} from './flows.ts';
import { refuseOtherRequest } from './idempotency.ts';
import { checkAttempts, type JobBuilder } from './job-builder.ts';
import type { EnqueueOptions } from './producer-options.ts';

/**
 * How a producer adds map-reduces: built and checked (every part, the combine job), re-attached
 * when the combine job is there already, else added as one BullMQ flow under the depth bound.
 */
export class FlowAdds {
  private flows: FlowProducer | undefined;

  constructor(
    private readonly o: {
      readonly redis: RedisClient;
      readonly adds: AddContext;
      readonly builder: JobBuilder;
      readonly costing: Costing;
      /** Registers the queue (once) before anything is added. */
      readonly registered: () => Promise<void>;
      /** The queue of batch-bound jobs (opened on first use). */
      readonly batchQueue: () => LlmqQueue;
    },
  ) {}

  /** Adds a map-reduce; its parts with a count in `counts` are reserved at it. */
  async add(
    flow: MapReduceRequest,
    options: EnqueueOptions,
    counts: readonly (number | undefined)[],
  ): Promise<EnqueuedFlow> {
    const { o } = this;
    const attempts = checkAttempts(options.attempts);
    await o.costing.load(flow.parts);
    const built = buildMapReduce(o.builder, flow, options, counts);
    await o.registered();
    const partIds = await this.existing(built.id, 'messages');
    if (partIds) {
      await this.refuseOtherFlow(built);
      return { id: built.id, partIds, created: false };
    }
    const { names } = o.adds;
    this.flows ??= new FlowProducer({ connection: o.redis, prefix: bullPrefix(names) });
    return addMapReduce(o.adds, this.flows, built, attempts, options);
  }

  /**
   * The part ids of a job already there under `id` (none when it is one call), or undefined
   * when there is none. Batch-bound jobs are looked for too with `via: 'batches'`.
   */
  async existing(id: string, via: Via): Promise<readonly string[] | undefined> {
    const { o } = this;
    const queues = via === 'batches' ? [o.adds.queue, o.batchQueue()] : [o.adds.queue];
    for (const queue of queues) {
      const job = await o.adds.call(() => queue.getJob(id));
      if (job) return job.data?.combine?.parts ?? [];
    }
    return undefined;
  }

  /**
   * Throws IdempotencyConflictError when the flow already under the key holds other requests
   * (its combine job's, or a part's that is still kept).
   */
  private async refuseOtherFlow(built: BuiltMapReduce): Promise<void> {
    const adds = this.o.adds;
    const jobs = [built.combine, ...built.parts];
    for (const [i, id] of [built.id, ...built.partIds].entries()) {
      const job = (await adds.call(() => adds.queue.getJob(id))) ?? undefined;
      refuseOtherRequest(id, job, jobs[i]!.digest);
    }
  }

  async close(): Promise<void> {
    await this.flows?.close();
  }
}
