import Anthropic from '@anthropic-ai/sdk';
import type { CallRecorder } from './recorder.ts';

/**
 * The client llmq's workers get in the bench: exactly what `createProviderClient` builds (SDK
 * retries off, 10-minute timeout), plus the recorder's `fetch`, which only watches.
 */
export function benchProviderClient(mockUrl: string, recorder: CallRecorder): Anthropic {
  return new Anthropic({
    apiKey: 'bench-key',
    baseURL: mockUrl,
    maxRetries: 0,
    timeout: 600_000,
    fetch: recorder.fetch,
  });
}
