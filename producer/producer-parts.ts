import { BudgetLedger } from '../shared/budgets.ts';
import { PageCosts } from '../shared/page-costs.ts';
import { type LlmqQueue, openDeadLetterQueue, openQueue } from '../shared/queues.ts';
import type { AddContext } from './bounded-adds.ts';
import type { CancelContext } from './cancel.ts';
import { Costing } from './costing.ts';
import { DepthGate } from './depth-gate.ts';
import { FlowAdds } from './flow-adds.ts';
import { JobBuilder } from './job-builder.ts';
import { jobOptionsFor } from './job-options.ts';
import type { JobStatus } from './job-status.ts';
import type { ProducerOptions } from './producer-options.ts';

/** What the parts call back into their producer for. */
export interface ProducerHooks {
  /** Runs a Redis command with the producer's typed errors and timeout. */
  readonly call: <T>(op: () => Promise<T>) => Promise<T>;
  readonly status: (id: string) => Promise<JobStatus | null>;
  /** Registers the queue (once) before anything is added. */
  readonly registered: () => Promise<void>;
  /** The queue of batch-bound jobs (opened on first use). */
  readonly batchQueue: () => LlmqQueue;
}

/**
 * The parts a producer is made of, from its options: what a job is costed and checked against,
 * its queue and dead letters, the depth bound, how it adds one job, a chunk or a flow, and how
 * it cancels.
 */
export function producerParts(options: ProducerOptions, hooks: ProducerHooks) {
  const { redis, names } = options;
  const ledger = options.budgets && new BudgetLedger(redis, names, options.budgets);
  const pageCosts = new PageCosts({ redis, names });
  const builder = new JobBuilder({
    pageCosts,
    limits: options.limits,
    scopes: options.scopes,
    modelsStrict: options.modelsStrict,
    headroom: options.headroom,
    ledger,
    tokenCounter: options.tokenCounter,
    deployments: options.deployments,
    batchDeployments: options.batchDeployments,
  });
  const costing = new Costing({
    redis,
    names,
    builder,
    pageCosts,
    readFleet: options.fleetLimits !== false,
    maxAgeMs: options.fleetLimitsMaxAgeMs ?? 1_000,
    call: hooks.call,
  });
  const jobOptions = jobOptionsFor(options);
  const queue = openQueue(redis, names);
  const deadLetters = openDeadLetterQueue(redis, names);
  // Connection trouble surfaces as typed errors from each call; the emitters must not throw.
  queue.on('error', () => {});
  deadLetters.on('error', () => {});
  const gate = new DepthGate({
    redis,
    names,
    queue,
    maxDepth: options.maxDepth ?? 0,
    tenantMaxDepth: options.tenantMaxDepth,
    maxDepthBytes: options.maxDepthBytes ?? 0,
    tenantMaxBytes: options.tenantMaxBytes,
    reservationTtlMs: options.reservationTtlMs,
    retryAfterMs: options.retryAfterMs,
    call: hooks.call,
  });
  const { call, status, registered, batchQueue } = hooks;
  const adds: AddContext = { names, queue, gate, call, jobOptions };
  const cancels: CancelContext = { queue, gate, call, status };
  const flowAdds = new FlowAdds({ redis, adds, builder, costing, registered, batchQueue });
  return {
    ledger,
    builder,
    costing,
    jobOptions,
    queue,
    deadLetters,
    gate,
    adds,
    cancels,
    flowAdds,
  };
}
