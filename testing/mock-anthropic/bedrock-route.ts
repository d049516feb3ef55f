/**
 * Claude on Amazon Bedrock: `POST /model/{modelId}/invoke` (JSON) and
 * `/model/{modelId}/invoke-with-response-stream` (AWS event-stream framing). The model is in the
 * path; the body is a Messages request without `model` and `stream`, with `anthropic_version`
 * (`bedrock-2023-05-31`, or the dated version the current SDK sends). The same call as the Claude
 * API's (message-call.ts), with Bedrock's face: no `anthropic-ratelimit-*` headers, its
 * `x-amzn-bedrock-*` token counts, and its errors (`{"message": …}` with `x-amzn-ErrorType`):
 * ValidationException 400, AccessDenied-like 403 without credentials, ThrottlingException 429,
 * ServiceUnavailableException 503 for overload, InternalServerException 500.
 */

import type { IncomingMessage, ServerResponse } from 'node:http';
import { answerEvents, messageBody, type StreamProgress } from './answer-events.ts';
import type { ApiErrorType } from './api-errors.ts';
import { awsKeyOf } from './auth.ts';
import { chunkMessage, exceptionMessage } from './aws-event-stream.ts';
import { parseJson, readBody, sendJson, TOO_LARGE_MESSAGE, untilGone } from './http-io.ts';
import { sleep } from './latency.ts';
import { type Admitted, playUnanswered, runCall } from './message-call.ts';
import type { RouteContext } from './messages-handler.ts';

const PATH = /^\/model\/([^/]+)\/(invoke|invoke-with-response-stream)$/;

/** The versions Bedrock takes: its own, or a dated one (what the current Bedrock SDK sends). */
const VERSION = /^(bedrock-2023-05-31|\d{4}-\d{2}-\d{2})$/;

const malformed = (why: string) =>
  `Malformed input request: ${why}, please reformat your input and try again.`;

/** Bedrock's face of each refusal: status, exception, message. */
function bedrockError(type: ApiErrorType, message: string): [number, string, string] {
  switch (type) {
    case 'invalid_request_error':
      return [400, 'ValidationException', message];
    case 'not_found_error':
      return [400, 'ValidationException', 'The provided model identifier is invalid.'];
    case 'rate_limit_error':
      return [429, 'ThrottlingException', 'Too many requests, please wait before trying again.'];
    case 'overloaded_error':
      return [503, 'ServiceUnavailableException', 'Bedrock is unable to process your request.'];
    case 'request_too_large':
      return [413, 'ValidationException', message];
    case 'authentication_error':
    case 'permission_error':
      return [403, 'AccessDeniedException', message];
    default:
      return [
        500,
        'InternalServerException',
        'The system encountered an unexpected error during processing. Try your request again.',
      ];
  }
}

/** Handles a Bedrock path; false when `path` is not one. */
export async function handleBedrock(
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
  context: RouteContext,
): Promise<boolean> {
  const match = PATH.exec(path);
  if (!match || req.method !== 'POST') return false;
  await serve(req, res, match[1]!, match[2] === 'invoke-with-response-stream', context);
  return true;
}

async function serve(
  req: IncomingMessage,
  res: ServerResponse,
  modelId: string,
  stream: boolean,
  context: RouteContext,
): Promise<void> {
  const { state } = context;
  state.stats.attempt();
  const fail = (status: number, exception: string, message: string) => {
    state.stats.response(status);
    sendJson(
      res,
      status,
      { message },
      {
        'x-amzn-errortype': `${exception}:http://internal.amazon.com/coral/com.amazon.bedrock/`,
        'x-amzn-requestid': context.requestId,
      },
    );
  };
  const apiKey = awsKeyOf(req);
  const raw = await readBody(req);
  if (apiKey === undefined) {
    return fail(403, 'MissingAuthenticationTokenException', 'Missing Authentication Token');
  }
  if (raw === null) return fail(...bedrockError('request_too_large', TOO_LARGE_MESSAGE));
  const body = parseJson(raw)?.value;
  const problem = checkBody(body);
  if (problem) return fail(400, 'ValidationException', problem);
  const model = decodeURIComponent(modelId);
  const outcome = await runCall(state, {
    apiKey,
    raw,
    body: { ...(body as object), model },
    stream,
  });
  if (playUnanswered(state, req, outcome)) return;
  if (outcome.kind === 'refused') {
    fail(...bedrockError(outcome.type, outcome.message));
  } else {
    state.stats.response(200);
    await answer(res, outcome, stream, context);
  }
}

/** What Bedrock says of a body that is not an object, lacks its version, or names the model. */
function checkBody(body: unknown): string | undefined {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    return malformed('#: expected type: JSONObject');
  }
  const fields = body as Record<string, unknown>;
  for (const key of ['model', 'stream']) {
    if (key in fields) return malformed(`#: extraneous key [${key}] is not permitted`);
  }
  const version = fields['anthropic_version'];
  if (version === undefined) return malformed('#: required key [anthropic_version] not found');
  if (typeof version !== 'string' || !VERSION.test(version)) {
    return malformed(`#/anthropic_version: ${JSON.stringify(version)} is not a valid enum value`);
  }
  return undefined;
}

async function answer(
  res: ServerResponse,
  outcome: Admitted,
  stream: boolean,
  { requestId, serverSignal }: RouteContext,
): Promise<void> {
  const signal = untilGone(res, serverSignal);
  const { answer: a } = outcome;
  const started = Date.now();
  const counts = {
    'x-amzn-requestid': requestId,
    'x-amzn-bedrock-input-token-count': String(a.usage.inputTokens),
    'x-amzn-bedrock-cache-read-input-token-count': String(a.usage.readTokens),
    'x-amzn-bedrock-cache-write-input-token-count': String(a.usage.creationTokens),
  };
  if (!stream) {
    const delivered = await sleep(a.latencyMs + a.perTokenMs * a.output.tokens, signal);
    if (delivered) {
      sendJson(res, 200, messageBody(a), {
        ...counts,
        'x-amzn-bedrock-output-token-count': String(a.output.tokens),
        'x-amzn-bedrock-invocation-latency': String(Date.now() - started),
      });
    }
    return outcome.settle(a.output.tokens);
  }
  res.writeHead(200, {
    'content-type': 'application/vnd.amazon.eventstream',
    'x-amzn-bedrock-content-type': 'application/json',
    'x-amzn-requestid': requestId,
  });
  const progress: StreamProgress = { sent: 0 };
  for await (const { event, data } of answerEvents(a, outcome.midway, signal, progress)) {
    if (res.destroyed) break;
    if (event === 'error') {
      res.write(
        exceptionMessage('modelStreamErrorException', {
          message: 'Overloaded',
          originalStatusCode: 529,
          originalMessage: JSON.stringify(data),
        }),
      );
      break;
    }
    const metrics =
      event === 'message_stop'
        ? {
            'amazon-bedrock-invocationMetrics': {
              inputTokenCount: a.usage.inputTokens,
              outputTokenCount: progress.sent,
              invocationLatency: Date.now() - started,
              firstByteLatency: a.latencyMs,
            },
          }
        : {};
    res.write(chunkMessage({ ...data, ...metrics }));
    outcome.produce(progress.sent);
  }
  res.end();
  outcome.settle(progress.sent);
}
