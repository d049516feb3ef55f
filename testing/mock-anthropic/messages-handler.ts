/**
 * `POST /v1/messages`: authentication, validation, spend cap, faults, rate limits, then a plain or
 * streamed answer after the configured latency.
 *
 * Order of checks (each answers and stops): 401 missing key → 413 body too large → 400 bad JSON or
 * field → 404 model not `claude-…` → 429 spend-capped key → fault draw (529, 500 or dropped socket)
 * → 429 rate limit → 200. Only a request that reaches the 200 is charged.
 */

import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { type ApiErrorType, apiErrorBody, ERROR_STATUS, newMessageId } from './api-errors.ts';
import { apiKeyOf, MISSING_KEY_MESSAGE } from './auth.ts';
import { readBody, sendJson } from './http-io.ts';
import { sleep } from './latency.ts';
import { type PlannedOutput, planOutput } from './output.ts';
import { fnv1a32 } from './prng.ts';
import {
  rateLimitHeaders,
  rateLimitMessage,
  retryAfterSeconds,
  spendCapMessage,
} from './rate-limit-responses.ts';
import type { Charge } from './rate-limits.ts';
import {
  describeIssue,
  firstIssue,
  type MessagesRequest,
  messagesRequestSchema,
} from './request-schema.ts';
import type { MockState } from './state.ts';
import { countRequestTokens } from './tokenizer.ts';

/** What every route handler gets besides the request and response. */
export interface RouteContext {
  readonly state: MockState;
  readonly requestId: string;
  /** Aborts when the server closes. */
  readonly serverSignal: AbortSignal;
}

/** Most `content_block_delta` events in one streamed answer; longer outputs put more tokens in each. */
const MAX_DELTAS = 64;

export async function handleMessages(
  req: IncomingMessage,
  res: ServerResponse,
  { state, requestId, serverSignal }: RouteContext,
): Promise<void> {
  const stats = state.stats;
  stats.attempt();
  const fail = (type: ApiErrorType, message: string, headers: OutgoingHttpHeaders = {}) => {
    const status = ERROR_STATUS[type];
    stats.response(status);
    sendJson(res, status, apiErrorBody(type, message, requestId), headers);
  };

  const apiKey = apiKeyOf(req);
  if (apiKey === undefined) {
    await readBody(req);
    return fail('authentication_error', MISSING_KEY_MESSAGE);
  }
  const raw = await readBody(req);
  if (raw === null) {
    return fail('request_too_large', 'Request exceeds the maximum allowed number of bytes.');
  }
  const request = parseRequest(raw);
  if (typeof request === 'string') return fail('invalid_request_error', request);
  if (!request.model.startsWith('claude-')) {
    return fail('not_found_error', `model: ${request.model}`);
  }

  const now = Date.now();
  if (state.spendCappedKeys.has(apiKey)) {
    stats.rateLimited('spend_cap');
    stats.response(429);
    // No retry-after: waiting minutes does not help, access returns next month.
    const body = apiErrorBody('rate_limit_error', spendCapMessage(now), requestId, {
      error_code: 'enforced_spend_limit_reached',
    });
    return sendJson(res, 429, body, rateLimitHeaders(state.limiterFor(request.model).state(now)));
  }

  const fault = state.faults.beforeAdmission();
  if (fault === 'drop') {
    stats.fault('drop');
    stats.response('dropped');
    req.socket.destroy();
    return;
  }
  if (fault === 'overloaded') {
    stats.fault('overloaded');
    return fail('overloaded_error', 'Overloaded');
  }
  if (fault === 'serverError') {
    stats.fault('serverError');
    return fail('api_error', 'Internal server error');
  }

  const inputTokens = countRequestTokens(request, state.options.inputCounting);
  const cost: Charge = {
    requests: 1,
    input_tokens: inputTokens,
    output_tokens: request.max_tokens,
    tokens: inputTokens + request.max_tokens,
  };
  const { options } = state;
  const limiter = state.limiterFor(request.model);
  const admission = limiter.consume(cost, now);
  const limitHeaders = rateLimitHeaders(limiter.state(now));
  if (!admission.admitted) {
    stats.rateLimited(admission.dimension);
    const limit = options.limits[admission.dimension] ?? 0;
    const headers: OutgoingHttpHeaders = {
      ...limitHeaders,
      'retry-after': String(retryAfterSeconds(admission.retryAfterMs)),
    };
    // A cost above the limit itself never fits: tell the SDK not to retry it.
    if (!admission.canEverFit) headers['x-should-retry'] = 'false';
    const message = rateLimitMessage(
      admission.dimension,
      limit,
      options.windowMs,
      admission.canEverFit,
    );
    return fail('rate_limit_error', message, headers);
  }

  const record = stats.admit(now, cost);
  const generation = state.generation;
  const refundUnused = (outputTokens: number) => {
    if (options.outputAccounting !== 'actual' || generation !== state.generation) return;
    const unused = request.max_tokens - outputTokens;
    if (unused <= 0) return;
    const amount: Partial<Charge> = { output_tokens: unused, tokens: unused };
    limiter.refund(admission.ticket, amount, Date.now());
    stats.refund(record, amount);
  };

  // Stop writing if the server closes or the client goes away.
  const gone = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) gone.abort();
  });
  const signal = AbortSignal.any([serverSignal, gone.signal]);
  const output = planOutput(fnv1a32(raw), request.max_tokens, state.outputShare);
  const answer: Answer = {
    request,
    output,
    inputTokens,
    headers: limitHeaders,
    latencyMs: state.latencyMs,
    perTokenMs: state.latencyPerOutputTokenMs,
  };

  if (request.stream === true) {
    const failMidway = state.faults.midStream();
    if (failMidway) stats.fault('midStreamError');
    stats.response(200);
    const sent = await streamAnswer(res, answer, failMidway, signal);
    refundUnused(sent);
    return;
  }
  const delivered = await sleep(answer.latencyMs + answer.perTokenMs * output.tokens, signal);
  if (delivered) {
    stats.response(200);
    sendJson(res, 200, messageBody(answer), answer.headers);
  }
  // The "model" produced the whole output even if nobody was left to read it.
  refundUnused(output.tokens);
}

/** The validated request, or the 400 message naming the field. */
function parseRequest(raw: string): MessagesRequest | string {
  let body: unknown;
  try {
    body = JSON.parse(raw);
  } catch {
    return 'There was an error parsing the body of your request: it is not valid JSON.';
  }
  const parsed = messagesRequestSchema.safeParse(body);
  return parsed.success ? parsed.data : describeIssue(firstIssue(parsed.error.issues));
}

interface Answer {
  readonly request: MessagesRequest;
  readonly output: PlannedOutput;
  readonly inputTokens: number;
  readonly headers: OutgoingHttpHeaders;
  readonly latencyMs: number;
  readonly perTokenMs: number;
}

function usage(inputTokens: number, outputTokens: number) {
  return {
    input_tokens: inputTokens,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
    output_tokens: outputTokens,
  };
}

/** The Message the "model" answers with (also a Message Batches item's). */
export function messageBody({
  request,
  output,
  inputTokens,
}: Pick<Answer, 'request' | 'output' | 'inputTokens'>) {
  return {
    id: newMessageId(),
    type: 'message',
    role: 'assistant',
    content: [{ type: 'text', text: output.pieces.join('') }],
    model: request.model,
    stop_reason: output.stopReason,
    stop_sequence: null,
    usage: usage(inputTokens, output.tokens),
  };
}

/**
 * Sends the answer as server-sent events: headers and the opening events at once, the deltas after
 * the latency (base before the first, per-token spread over them), then the closing events. With
 * `failMidway`, an `error` event replaces everything after half the deltas. Resolves with the
 * output tokens actually sent.
 */
async function streamAnswer(
  res: ServerResponse,
  answer: Answer,
  failMidway: boolean,
  signal: AbortSignal,
): Promise<number> {
  const { request, output, inputTokens } = answer;
  res.writeHead(200, {
    ...answer.headers,
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
  });
  const send = (event: string, data: unknown) => {
    if (!res.destroyed) res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  };
  send('message_start', {
    type: 'message_start',
    message: {
      id: newMessageId(),
      type: 'message',
      role: 'assistant',
      content: [],
      model: request.model,
      stop_reason: null,
      stop_sequence: null,
      usage: usage(inputTokens, 1),
    },
  });
  send('content_block_start', {
    type: 'content_block_start',
    index: 0,
    content_block: { type: 'text', text: '' },
  });
  send('ping', { type: 'ping' });

  const perDelta = Math.ceil(output.tokens / MAX_DELTAS);
  const deltas = Math.ceil(output.tokens / perDelta);
  const failAfter = failMidway ? Math.ceil(deltas / 2) : Number.POSITIVE_INFINITY;
  let sent = 0;
  // Each delta is due at its moment from the start (latency + per-token time of what it ends
  // with): timers fire late, a millisecond at least, and sleeping a piece at a time would add
  // that lateness up (40 tokens at 0.5 ms took 50 ms instead of 20).
  const begun = performance.now();
  const waitUntil = (dueMs: number) => sleep(dueMs - (performance.now() - begun), signal);
  if (!(await waitUntil(answer.latencyMs))) return sent;
  for (let i = 0; i < deltas; i++) {
    const pieces = output.pieces.slice(i * perDelta, (i + 1) * perDelta);
    const due = answer.latencyMs + answer.perTokenMs * (sent + pieces.length);
    if (!(await waitUntil(due))) return sent;
    send('content_block_delta', {
      type: 'content_block_delta',
      index: 0,
      delta: { type: 'text_delta', text: pieces.join('') },
    });
    sent += pieces.length;
    if (i + 1 >= failAfter) {
      send('error', { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } });
      res.end();
      return sent;
    }
  }
  send('content_block_stop', { type: 'content_block_stop', index: 0 });
  send('message_delta', {
    type: 'message_delta',
    delta: { stop_reason: output.stopReason, stop_sequence: null },
    usage: usage(inputTokens, output.tokens),
  });
  send('message_stop', { type: 'message_stop' });
  res.end();
  return sent;
}
