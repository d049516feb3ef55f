/**
 * llmq as a library: `import { createProducer, startWorker } from 'llmq'`. Every CLI command is
 * a thin shell over one of these; the mock provider for tests is in `llmq/testing`.
 */

export { type DashboardHandle, type DashboardOptions, startDashboard } from './dashboard/server.ts';
export * from './producer/index.ts';
export { type Config, type ConfigSources, resolveConfig } from './shared/config.ts';
export {
  ConfigError,
  CostExceedsLimitError,
  LimiterUnavailableError,
  LlmqError,
  type LlmqErrorCode,
  QueueFullError,
  RedisUnavailableError,
  RequestValidationError,
} from './shared/errors.ts';
export { type Cost, estimateCost, estimateInputTokens } from './shared/estimate.ts';
export type { AttemptRecord, DeadLetter, JobData, JobResult, StoredMessage } from './shared/job.ts';
export { bullPrefix, deadLetterQueueName, type QueueNames } from './shared/keys.ts';
export {
  type AcquireManyOptions,
  type AcquireOptions,
  Limiter,
  type LimiterOptions,
} from './shared/limiter/limiter.ts';
export type {
  Decision,
  Dimension,
  DimensionLimits,
  LimiterSnapshot,
  Reservation,
  Usage,
} from './shared/limiter/types.ts';
export { PRIORITY_LANES, type PriorityLane, resolvePriority } from './shared/priority.ts';
export {
  type ProviderReading,
  readRateLimitHeaders,
  retryAfterMs,
} from './shared/provider-headers.ts';
export { openDeadLetterQueue, openQueue } from './shared/queues.ts';
export { connectRedis, type RedisClient } from './shared/redis.ts';
export {
  type MessagesRequest,
  MessagesRequestSchema,
  parseMessagesRequest,
} from './shared/request.ts';
export { getQueueStatus, type QueueStatus } from './shared/status.ts';
export * from './worker/index.ts';
