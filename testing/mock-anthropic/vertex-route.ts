/**
 * Claude on Google Vertex AI:
 * `POST /v1/projects/{p}/locations/{l}/publishers/anthropic/models/{model}:rawPredict` (JSON) and
 * `:streamRawPredict` (server-sent events, as the Claude API's), and `count-tokens:rawPredict`.
 * The model is in the path; the body is a Messages request without `model`, with
 * `anthropic_version` (`vertex-2023-10-16`, or the dated version the current SDK sends). The
 * same call as the Claude API's (message-call.ts) with Vertex's face: no `anthropic-ratelimit-*`
 * headers; Google's error shape (`{"error": {code, message, status}}`) for a missing token (401
 * UNAUTHENTICATED), an unknown model (404 NOT_FOUND) and rate limits (429 RESOURCE_EXHAUSTED);
 * the model's own errors (400, 500, 529) in the Claude API's shape.
 */

import type { IncomingMessage, ServerResponse } from 'node:http';
import { messageBody } from './answer-events.ts';
import { type ApiErrorType, apiErrorBody, ERROR_STATUS } from './api-errors.ts';
import { bearerTokenOf } from './auth.ts';
import {
  NOT_JSON_MESSAGE,
  parseJson,
  readBody,
  sendJson,
  TOO_LARGE_MESSAGE,
  untilGone,
} from './http-io.ts';
import { sleep } from './latency.ts';
import { playUnanswered, runCall } from './message-call.ts';
import { type RouteContext, streamAnswer } from './messages-handler.ts';
import { countTokensAnswer } from './request-tokens.ts';

const PATH =
  /^\/v1\/projects\/([^/]+)\/locations\/([^/]+)\/publishers\/anthropic\/models\/(.+):(rawPredict|streamRawPredict)$/;

/** The versions Vertex takes: its own, or a dated one (what the current Vertex SDK sends). */
const VERSION = /^(vertex-2023-10-16|\d{4}-\d{2}-\d{2})$/;

const GOOGLE_STATUS: Record<number, string> = {
  401: 'UNAUTHENTICATED',
  404: 'NOT_FOUND',
  429: 'RESOURCE_EXHAUSTED',
};

interface VertexCall {
  readonly project: string;
  readonly location: string;
  readonly model: string;
  readonly stream: boolean;
}

/** Handles a Vertex path; false when `path` is not one. */
export async function handleVertex(
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
  context: RouteContext,
): Promise<boolean> {
  const match = PATH.exec(path);
  if (!match || req.method !== 'POST') return false;
  const [, project, location, model, method] = match.map((part) => decodeURIComponent(part));
  const call = {
    project: project!,
    location: location!,
    model: model!,
    stream: method === 'streamRawPredict',
  };
  await serve(req, res, call, context);
  return true;
}

async function serve(
  req: IncomingMessage,
  res: ServerResponse,
  call: VertexCall,
  context: RouteContext,
): Promise<void> {
  const { state, requestId } = context;
  const counting = call.model === 'count-tokens';
  if (!counting) state.stats.attempt();
  const fail = (type: ApiErrorType, message: string) => {
    const status = ERROR_STATUS[type];
    if (!counting) state.stats.response(status);
    const google = GOOGLE_STATUS[status];
    const body = google
      ? { error: { code: status, message, status: google } }
      : apiErrorBody(type, message, requestId);
    sendJson(res, status, body);
  };
  const apiKey = bearerTokenOf(req);
  const raw = await readBody(req);
  if (apiKey === undefined) {
    return fail(
      'authentication_error',
      'Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or other valid authentication credential.',
    );
  }
  if (raw === null) return fail('request_too_large', TOO_LARGE_MESSAGE);
  const body = parseJson(raw);
  if (!body) return fail('invalid_request_error', NOT_JSON_MESSAGE);
  const problem = checkBody(body.value, counting);
  if (problem) return fail('invalid_request_error', problem);
  if (counting) return countTokens(res, body.value, context, fail);

  const request = { ...(body.value as object), model: call.model };
  const stream = call.stream || (body.value as { stream?: unknown }).stream === true;
  const outcome = await runCall(state, { apiKey, raw, body: request, stream });
  if (playUnanswered(state, req, outcome)) return;
  if (outcome.kind === 'refused') {
    if (outcome.type === 'not_found_error') {
      const name = `projects/${call.project}/locations/${call.location}/publishers/anthropic/models/${call.model}`;
      return fail('not_found_error', `Publisher Model \`${name}\` not found.`);
    }
    if (outcome.type === 'rate_limit_error') {
      return fail('rate_limit_error', quotaMessage(call.model));
    }
    return fail(outcome.type, outcome.message);
  }
  state.stats.response(200);
  const signal = untilGone(res, context.serverSignal);
  if (stream) return streamAnswer(res, outcome, signal, {});
  const { answer } = outcome;
  if (await sleep(answer.latencyMs + answer.perTokenMs * answer.output.tokens, signal)) {
    sendJson(res, 200, messageBody(answer));
  }
  outcome.settle(answer.output.tokens);
}

/** Vertex's words for a quota that ran out. */
function quotaMessage(model: string): string {
  const base = model.split('@')[0];
  return (
    'Quota exceeded for aiplatform.googleapis.com/online_prediction_tokens_per_minute_per_base_model ' +
    `with base model: anthropic-${base}. Please submit a quota increase request.`
  );
}

/** What the model says of a body that is not an object, lacks its version, or names a model. */
function checkBody(body: unknown, counting: boolean): string | undefined {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    return 'Input should be a valid dictionary';
  }
  const fields = body as Record<string, unknown>;
  if (!counting && 'model' in fields) return 'model: Extra inputs are not permitted';
  const version = fields['anthropic_version'];
  if (version === undefined) return 'anthropic_version: Field required';
  if (typeof version !== 'string' || !VERSION.test(version)) {
    return `anthropic_version: Input should be 'vertex-2023-10-16', got ${JSON.stringify(version)}`;
  }
  return undefined;
}

/** `count-tokens:rawPredict`: the model in the body, `{"input_tokens": N}`. */
async function countTokens(
  res: ServerResponse,
  body: unknown,
  { state }: RouteContext,
  fail: (type: ApiErrorType, message: string) => void,
): Promise<void> {
  state.stats.countTokensCall();
  const answer = await countTokensAnswer(body, state.options.inputCounting);
  if ('refused' in answer) return fail(answer.refused, answer.message);
  sendJson(res, 200, { input_tokens: answer.tokens });
}
