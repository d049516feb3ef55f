/**
 * `POST /v1/messages`, the Claude API's door: the key from `x-api-key` (or a bearer token), the
 * body, then message-call.ts decides; the answer is JSON or server-sent events, with the
 * `anthropic-ratelimit-*` readings on every response, 429s included.
 *
 * Before message-call.ts: 401 missing key → 413 body too large → 400 not JSON.
 */

import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { answerEvents, messageBody, type StreamProgress } from './answer-events.ts';
import { type ApiErrorType, apiErrorBody, ERROR_STATUS } from './api-errors.ts';
import { apiKeyOf, MISSING_KEY_MESSAGE } from './auth.ts';
import {
  NOT_JSON_MESSAGE,
  parseJson,
  readBody,
  sendJson,
  TOO_LARGE_MESSAGE,
  untilGone,
} from './http-io.ts';
import { sleep } from './latency.ts';
import { type Admitted, playUnanswered, runCall } from './message-call.ts';
import type { MockState } from './state.ts';

/** What every route handler gets besides the request and response. */
export interface RouteContext {
  readonly state: MockState;
  readonly requestId: string;
  /** Aborts when the server closes. */
  readonly serverSignal: AbortSignal;
}

export async function handleMessages(
  req: IncomingMessage,
  res: ServerResponse,
  context: RouteContext,
): Promise<void> {
  const { state, requestId } = context;
  const stats = state.stats;
  stats.attempt();
  const fail = (
    type: ApiErrorType,
    message: string,
    headers: OutgoingHttpHeaders = {},
    details?: { error_code: string },
  ) => {
    const status = ERROR_STATUS[type];
    stats.response(status);
    sendJson(res, status, apiErrorBody(type, message, requestId, details), headers);
  };

  const apiKey = apiKeyOf(req);
  if (apiKey === undefined) {
    await readBody(req);
    return fail('authentication_error', MISSING_KEY_MESSAGE);
  }
  const raw = await readBody(req);
  if (raw === null) return fail('request_too_large', TOO_LARGE_MESSAGE);
  const body = parseJson(raw);
  if (!body) return fail('invalid_request_error', NOT_JSON_MESSAGE);
  const stream = (body.value as { stream?: unknown } | null)?.stream === true;
  const outcome = await runCall(state, { apiKey, raw, body: body.value, stream });
  if (playUnanswered(state, req, outcome)) return;
  if (outcome.kind === 'refused') {
    return fail(outcome.type, outcome.message, outcome.headers, outcome.details);
  }
  stats.response(200);
  const signal = untilGone(res, context.serverSignal);
  if (stream) return streamAnswer(res, outcome, signal);
  const { answer } = outcome;
  const delivered = await sleep(
    answer.latencyMs + answer.perTokenMs * answer.output.tokens,
    signal,
  );
  if (delivered) sendJson(res, 200, messageBody(answer), outcome.headers);
  // The "model" produced the whole output even if nobody was left to read it.
  outcome.settle(answer.output.tokens);
}

/** Sends the answer as server-sent events (headers at once), then settles what was sent. */
export async function streamAnswer(
  res: ServerResponse,
  outcome: Admitted,
  signal: AbortSignal,
  headers: OutgoingHttpHeaders = outcome.headers,
): Promise<void> {
  res.writeHead(200, {
    ...headers,
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
  });
  const progress: StreamProgress = { sent: 0 };
  for await (const { event, data } of answerEvents(
    outcome.answer,
    outcome.midway,
    signal,
    progress,
  )) {
    if (res.destroyed) break;
    res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
    outcome.produce(progress.sent);
  }
  res.end();
  outcome.settle(progress.sent);
}
