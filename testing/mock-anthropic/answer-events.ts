/**
 * An admitted answer as the Messages API gives it: the whole Message (`messageBody`), or the
 * events of its stream with their timing (`answerEvents`), which each door frames in its own way
 * (server-sent events for the Claude API and Vertex, AWS event-stream for Bedrock).
 */

import { newMessageId } from './api-errors.ts';
import type { MidwayFault } from './faults.ts';
import { sleep, untilAborted } from './latency.ts';
import { outputPieces, outputText, type PlannedOutput } from './output.ts';
import type { CacheUse } from './prompt-cache.ts';
import type { MessagesRequest } from './request-schema.ts';

/** Most `content_block_delta` events in one streamed answer; longer outputs put more tokens in each. */
const MAX_DELTAS = 64;

/** The answer the "model" gives an admitted call. */
export interface Answer {
  readonly request: MessagesRequest;
  readonly output: PlannedOutput;
  readonly usage: CacheUse;
  readonly latencyMs: number;
  readonly perTokenMs: number;
}

/** One event of a streamed answer: its name and its JSON. */
export interface AnswerEvent {
  readonly event: string;
  readonly data: Record<string, unknown>;
}

/** `usage` as the API reports it, cache fields included. */
export function usageBody(usage: CacheUse, outputTokens: number) {
  return {
    input_tokens: usage.inputTokens,
    cache_creation_input_tokens: usage.creationTokens,
    cache_read_input_tokens: usage.readTokens,
    cache_creation: {
      ephemeral_5m_input_tokens: usage.creation5m,
      ephemeral_1h_input_tokens: usage.creation1h,
    },
    output_tokens: outputTokens,
  };
}

/** The Message the "model" answers with (also a Message Batches item's). */
export function messageBody({
  request,
  output,
  usage,
}: Pick<Answer, 'request' | 'output' | 'usage'>) {
  return {
    id: newMessageId(),
    type: 'message',
    role: 'assistant',
    content: [{ type: 'text', text: outputText(output) }],
    model: request.model,
    stop_reason: output.stopReason,
    stop_sequence: null,
    usage: usageBody(usage, output.tokens),
  };
}

/** What a stream sent: the output tokens that went out. */
export interface StreamProgress {
  sent: number;
}

/**
 * The events of a streamed answer: the opening events at once, the deltas after the latency
 * (base before the first, per-token spread over them), then the closing events. The text is made
 * a delta at a time. With `midway` 'error', an `error` event replaces everything after half the
 * deltas; with 'stall', nothing more comes after them until `signal` aborts (the client gave up
 * or the server closes). Ends early, quietly, when `signal` aborts; `progress.sent` counts what
 * went.
 */
export async function* answerEvents(
  answer: Answer,
  midway: MidwayFault,
  signal: AbortSignal,
  progress: StreamProgress,
): AsyncGenerator<AnswerEvent> {
  const { request, output, usage } = answer;
  yield event('message_start', {
    message: {
      id: newMessageId(),
      type: 'message',
      role: 'assistant',
      content: [],
      model: request.model,
      stop_reason: null,
      stop_sequence: null,
      usage: usageBody(usage, 1),
    },
  });
  yield event('content_block_start', { index: 0, content_block: { type: 'text', text: '' } });
  yield event('ping', {});

  const perDelta = Math.ceil(output.tokens / MAX_DELTAS);
  const deltas = Math.ceil(output.tokens / perDelta);
  const failAfter = midway ? Math.ceil(deltas / 2) : Number.POSITIVE_INFINITY;
  const pieces = outputPieces(output);
  // Each delta is due at its moment from the start (latency + per-token time of what it ends
  // with): timers fire late, a millisecond at least, and sleeping a piece at a time would add
  // that lateness up (40 tokens at 0.5 ms took 50 ms instead of 20).
  const begun = performance.now();
  const waitUntil = (dueMs: number) => sleep(dueMs - (performance.now() - begun), signal);
  if (!(await waitUntil(answer.latencyMs))) return;
  for (let i = 0; i < deltas; i++) {
    const count = Math.min(perDelta, output.tokens - progress.sent);
    if (!(await waitUntil(answer.latencyMs + answer.perTokenMs * (progress.sent + count)))) return;
    let text = '';
    for (let n = 0; n < count; n++) text += pieces.next().value ?? '';
    yield event('content_block_delta', { index: 0, delta: { type: 'text_delta', text } });
    progress.sent += count;
    if (i + 1 >= failAfter && midway === 'stall') {
      // Silence, the connection open: only the client (or the server closing) ends it.
      await untilAborted(signal);
      return;
    }
    if (i + 1 >= failAfter) {
      yield {
        event: 'error',
        data: { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } },
      };
      return;
    }
  }
  yield event('content_block_stop', { index: 0 });
  yield event('message_delta', {
    delta: { stop_reason: output.stopReason, stop_sequence: null },
    usage: usageBody(usage, output.tokens),
  });
  yield event('message_stop', {});
}

function event(name: string, fields: Record<string, unknown>): AnswerEvent {
  return { event: name, data: { type: name, ...fields } };
}
