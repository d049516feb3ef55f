/**
 * llmq as a library: a producer enqueues Anthropic Messages requests, workers in any number of
 * processes run them once the shared budget in Redis admits them, and `waitForResult` gives
 * the answer back. The mock provider for tests is in `llmq/testing`.
 *
 * @example
 * ```ts
 * import { connectRedis, createProducer, createProviderClient, resolveConfig, startWorker } from
 *   'llmq';
 *
 * const config = resolveConfig({ env: process.env });
 * const redis = connectRedis(config.redisUrl);
 * const worker = await startWorker({
 *   redis,
 *   names: { prefix: config.prefix, queue: config.queue },
 *   client: createProviderClient({ apiKey: process.env.ANTHROPIC_API_KEY ?? '' }),
 *   limiter: { limits: { tokens: 80_000 }, windowMs: 60_000 },
 * });
 * const producer = createProducer(config);
 * const id = await producer.enqueue({
 *   model: 'claude-haiku-4-5',
 *   max_tokens: 300,
 *   messages: [{ role: 'user', content: 'Hello' }],
 * });
 * const result = await producer.waitForResult(id, { timeout: 60_000 });
 * await Promise.all([producer.close(), worker.stop()]);
 * await redis.quit();
 * ```
 *
 * @packageDocumentation
 */

export {
  type DashboardHandle,
  type DashboardOptions,
  startDashboard,
} from './dashboard/server.ts';
export { createProducer } from './producer/create-producer.ts';
export { JobFailedError, WaitTimeoutError } from './producer/errors.ts';
export { type HttpApi, type HttpApiOptions, startHttpApi } from './producer/http/server.ts';
export type { JobStatus } from './producer/job-status.ts';
export type { Producer } from './producer/producer.ts';
export type { EnqueueManyOptions, EnqueueOptions } from './producer/producer-options.ts';
export type { WaitOptions } from './producer/result-waiter.ts';
export { type Config, type ConfigSources, resolveConfig } from './shared/config.ts';
export {
  CostExceedsLimitError,
  LlmqError,
  type LlmqErrorCode,
  QueueFullError,
  RequestValidationError,
} from './shared/errors.ts';
export type { JobResult } from './shared/job.ts';
export type { QueueNames } from './shared/keys.ts';
export { connectRedis } from './shared/redis.ts';
export { createProviderClient } from './worker/provider.ts';
export { startWorker, type WorkerHandle, type WorkerOptions } from './worker/worker.ts';
