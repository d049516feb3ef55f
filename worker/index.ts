export { fullJitterBackoff, type BackoffOptions } from './backoff.ts';
export { CircuitBreaker, type BreakerOptions, type BreakerState } from './breaker.ts';
export { classifyProviderError, type Classified, type FailureKind } from './classify.ts';
export { deadLetter, listDeadLetters, purgeDeadLetters, retryDeadLetter, showDeadLetter, type DeadLetterSummary } from './dead-letters.ts';
export { callProvider, createProviderClient } from './provider.ts';
export { startWorker, type WorkerHandle, type WorkerLogger, type WorkerOptions } from './worker.ts';
