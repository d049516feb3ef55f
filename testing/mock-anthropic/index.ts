/**
 * A mock of the Anthropic Messages API for tests, the demo and benchmarks: a real HTTP server that
 * the `@anthropic-ai/sdk` cannot tell from the real API where llmq cares (shapes, errors, rate-limit
 * headers, retry-after, streaming), with limits, latency and faults under the caller's control.
 */

export type { FaultRates } from './faults.ts';
export type {
  MockAnthropicOptions,
  OptionLabel,
  OptionLabels,
  ResolvedMockAnthropicOptions,
} from './options.ts';
export {
  faultRatesSchema,
  mockAnthropicOptionsSchema,
  parseMockAnthropicOptions,
} from './options.ts';
export { countMockTokens } from './request-tokens.ts';
export type { MockAnthropicHandle } from './server.ts';
export { startMockAnthropic } from './server.ts';
export type { MockStats } from './stats.ts';
export type { InputCounting } from './tokenizer.ts';
export {
  countTextTokens,
  MESSAGE_OVERHEAD_TOKENS,
  REQUEST_BASE_TOKENS,
  TOOL_OVERHEAD_TOKENS,
} from './tokenizer.ts';
