/**
 * `llmq/testing`: a mock of the Anthropic Messages API over real HTTP (rate limits and their
 * headers, latency, faults, streaming), for tests of code that runs llmq.
 */
export type { FaultRates } from './scripts/mock-anthropic/faults.ts';
export type { MockAnthropicOptions } from './scripts/mock-anthropic/options.ts';
export { type MockAnthropicHandle, startMockAnthropic } from './scripts/mock-anthropic/server.ts';
export type { MockStats } from './scripts/mock-anthropic/stats.ts';
export { countMockTokens, countTextTokens } from './scripts/mock-anthropic/tokenizer.ts';
