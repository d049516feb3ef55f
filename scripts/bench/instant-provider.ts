import { setTimeout as sleep } from 'node:timers/promises';
import type { StoredMessage } from '../../shared/job.ts';
import type { MessagesRequest } from '../../shared/request.ts';
import type { ProviderCaller } from '../../worker/provider.ts';

const NO_HEADERS = new Headers();

/**
 * A provider that answers at once, in-process, with no network: the "zero-latency provider" of
 * the overhead scenario, so what is left is llmq's own cost (gate, stamping, settling, BullMQ).
 * It charges what the request says it will: its estimated input and one output token.
 */
export function instantProvider(delayMs = 0): ProviderCaller {
  let n = 0;
  return async (request: MessagesRequest, options) => {
    await options.onStart?.(NO_HEADERS);
    if (delayMs > 0) await sleep(delayMs);
    const message: StoredMessage = {
      id: `msg_instant_${++n}`,
      model: request.model,
      role: 'assistant',
      content: [{ type: 'text', text: '.', citations: null }],
      stop_reason: 'end_turn',
      stop_sequence: null,
      usage: {
        input_tokens: 16,
        output_tokens: 1,
        cache_creation_input_tokens: null,
        cache_read_input_tokens: null,
      },
    };
    return { message, headers: NO_HEADERS, requestId: null, latencyMs: 0 };
  };
}
