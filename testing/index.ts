/**
 * `llmq/testing`: a mock of the Anthropic Messages API over real HTTP (rate limits and their
 * headers, latency, faults, streaming), for tests of code that runs llmq.
 */
export type { FaultRates } from './mock-anthropic/faults.ts';
export type { MockAnthropicOptions } from './mock-anthropic/options.ts';
export { countMockTokens } from './mock-anthropic/request-tokens.ts';
export { type MockAnthropicHandle, startMockAnthropic } from './mock-anthropic/server.ts';
export type { MockStats } from './mock-anthropic/stats.ts';
export { countTextTokens } from './mock-anthropic/tokenizer.ts';
