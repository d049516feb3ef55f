/**
 * The producer side of llmq: enqueue (one or many), wait for results, the HTTP enqueue API and
 * batch summarization runs.
 */
import type { JobResult } from '../shared/job.ts';
import type { EnqueueManyOptions, EnqueueOptions, Producer } from './producer.ts';
import type { WaitOptions } from './result-waiter.ts';

export {
  CostExceedsLimitError,
  QueueFullError,
  RedisUnavailableError,
  RequestValidationError,
} from '../shared/errors.ts';
export type { ResultLine } from './batch/results-file.ts';
export {
  type BatchReport,
  type BatchSummarizeOptions,
  DEFAULT_SUMMARY_PROMPT,
  runBatchSummarize,
} from './batch/summarize.ts';
export { createProducer } from './create-producer.ts';
export { DepthGate, type DepthGateOptions } from './depth-gate.ts';
export { JobFailedError, JobNotFoundError, WaitTimeoutError } from './errors.ts';
export { ApiKeyStore, hashApiKey } from './http/api-keys.ts';
export {
  apiKeyAuth,
  createRoutes,
  type Handler,
  type HandlerRequest,
  type HandlerResponse,
  type Route,
} from './http/handlers.ts';
export { OPENAPI } from './http/openapi.ts';
export { type HttpApi, type HttpApiOptions, startHttpApi } from './http/server.ts';
export { jobIdForKey } from './idempotency.ts';
export type { JobFailure, JobPhase, JobStatus } from './job-status.ts';
export {
  type EnqueuedJob,
  type EnqueueManyOptions,
  type EnqueueOptions,
  Producer,
  type ProducerOptions,
  type TokenCounter,
} from './producer.ts';
export {
  ResultWaiter,
  type ResultWaiterOptions,
  type WaitOptions,
  waitForJobResult,
} from './result-waiter.ts';

/** Validates, costs and adds one request; resolves with its job id (`producer.enqueue`). */
export function enqueue(
  producer: Producer,
  request: unknown,
  options?: EnqueueOptions,
): Promise<string> {
  return producer.enqueue(request, options);
}

/** Adds many requests with addBulk, in chunks; resolves with their ids in order (`producer.enqueueMany`). */
export function enqueueMany(
  producer: Producer,
  requests: readonly unknown[],
  options?: EnqueueManyOptions,
): Promise<string[]> {
  return producer.enqueueMany(requests, options);
}

/** Resolves with a job's result, or rejects with JobFailedError / JobNotFoundError / WaitTimeoutError. */
export function waitForResult(
  producer: Producer,
  id: string,
  options?: WaitOptions,
): Promise<JobResult> {
  return producer.waitForResult(id, options);
}
