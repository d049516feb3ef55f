export { type BackoffOptions, fullJitterBackoff } from './backoff.ts';
export { type BreakerOptions, type BreakerState, CircuitBreaker } from './breaker.ts';
export { type Classified, classifyProviderError, type FailureKind } from './classify.ts';
export {
  type DeadLetterSummary,
  deadLetter,
  listDeadLetters,
  purgeDeadLetters,
  retryDeadLetter,
  showDeadLetter,
} from './dead-letters.ts';
export {
  callProvider,
  createProviderClient,
  type ProviderCaller,
  type ProviderCallOptions,
  type ProviderCallResult,
} from './provider.ts';
export { startWorker, type WorkerHandle, type WorkerLogger, type WorkerOptions } from './worker.ts';
