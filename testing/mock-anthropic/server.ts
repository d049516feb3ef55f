/**
 * The mock Anthropic HTTP server: routing, the small routes (count_tokens and the `/__` control
 * routes), and the lifecycle (listen, close with open streams).
 *
 * Routes:
 * - `POST /v1/messages` — see messages-handler.ts;
 * - `POST /v1/messages/count_tokens` — `{"input_tokens": N}` by the same counter as
 *   `/v1/messages`, not rate limited;
 * - `/v1/messages/batches…` — Message Batches, see batches.ts;
 * - Bedrock's `POST /model/{id}/invoke` and `invoke-with-response-stream`, see bedrock-route.ts;
 * - Vertex AI's `POST /v1/projects/…/models/{model}:rawPredict` and `:streamRawPredict`, see
 *   vertex-route.ts;
 * - `GET /__stats` — MockStats JSON; `POST /__reset` — 204; `POST /__faults` — 204, body as
 *   `setFaults`.
 */

import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { LlmqError } from '../../shared/errors.ts';
import { type ApiErrorType, apiErrorBody, ERROR_STATUS, newRequestId } from './api-errors.ts';
import { apiKeyOf, MISSING_KEY_MESSAGE } from './auth.ts';
import { type BatchFaults, type BatchOptions, type BatchStats, handleBatches } from './batches.ts';
import { handleBedrock } from './bedrock-route.ts';
import {
  NOT_JSON_MESSAGE,
  parseJson,
  readBody,
  sendEmpty,
  sendJson,
  TOO_LARGE_MESSAGE,
} from './http-io.ts';
import { handleMessages, type RouteContext } from './messages-handler.ts';
import { type MockAnthropicOptions, parseMockAnthropicOptions } from './options.ts';
import { countTokensAnswer } from './request-tokens.ts';
import { MockState, type RuntimeOptions } from './state.ts';
import type { MockStats } from './stats.ts';
import { handleVertex } from './vertex-route.ts';

/**
 * A running mock: its URL for the SDK's `baseURL`, what it saw, and runtime knobs.
 *
 * @example
 * ```ts
 * const mock = await startMockAnthropic({});
 * const client = createProviderClient({ apiKey: 'sk-test', baseURL: mock.url });
 * // … run jobs …
 * console.log(mock.stats().attempts);
 * await mock.close();
 * ```
 */
export interface MockAnthropicHandle {
  /** Base URL to give the SDK as `baseURL`, without `/v1`, e.g. `http://127.0.0.1:43123`. */
  readonly url: string;
  /** What the server saw and charged so far. */
  stats(): MockStats;
  /** Clears stats and limit state, and restarts the fault generator from the seed. */
  reset(): void;
  /** Replaces the fault rates at runtime (absent rates become 0). @throws ConfigError */
  setFaults(faults: MockAnthropicOptions['faults']): void;
  /**
   * Changes latency, output share or spend-capped keys at runtime. @throws ConfigError
   * @inlineType RuntimeOptions
   */
  setOptions(options: RuntimeOptions): void;
  /** Message Batches: what was created and fetched, their faults and processing time. */
  readonly batches: {
    /** How many batches were created, canceled and fetched, with how many items. */
    stats(): BatchStats;
    /** Items that end in error and batches that expire, from now on. */
    setFaults(faults: BatchFaults): void;
    /** Processing time and the largest batch, from now on. */
    setOptions(options: BatchOptions): void;
  };
  /** Stops listening and destroys open sockets (streams included); resolves when closed. */
  close(): Promise<void>;
}

/**
 * Starts a mock of the Anthropic Messages API on `options.host:options.port` (defaults
 * 127.0.0.1 and a free port).
 *
 * @throws ConfigError when an option is invalid.
 * @example
 * ```ts
 * const mock = await startMockAnthropic({ limits: { outputTokens: 4_000 } });
 * const client = new Anthropic({ apiKey: 'test', baseURL: mock.url });
 * ```
 */
export async function startMockAnthropic(
  options: MockAnthropicOptions = {},
): Promise<MockAnthropicHandle> {
  const resolved = parseMockAnthropicOptions(options);
  const state = new MockState(resolved);
  const closing = new AbortController();
  const sockets = new Set<Socket>();

  const server = createServer((req, res) => {
    const context: RouteContext = {
      state,
      requestId: newRequestId(),
      serverSignal: closing.signal,
    };
    // Every response, control routes included, carries its id like the real API's.
    res.setHeader('request-id', context.requestId);
    route(req, res, context).catch((error: unknown) => {
      // A bug in the mock must show up as a 500 the test can see, not a hung request.
      const message = `mock-anthropic failed: ${String(error)}`;
      sendJson(res, 500, apiErrorBody('api_error', message, context.requestId));
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(resolved.port, resolved.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const host = resolved.host.includes(':') ? `[${resolved.host}]` : resolved.host;

  let closed: Promise<void> | undefined;
  return {
    url: `http://${host}:${port}`,
    stats: () => state.stats.snapshot(),
    reset: () => state.reset(),
    setFaults: (faults) => state.setFaults(faults),
    setOptions: (runtime) => state.setOptions(runtime),
    batches: {
      stats: () => state.batches.stats(),
      setFaults: (faults) => state.batches.setFaults(faults),
      setOptions: (options) => state.batches.setOptions(options),
    },
    close() {
      closed ??= new Promise<void>((resolve) => {
        closing.abort();
        server.close(() => resolve());
        for (const socket of sockets) socket.destroy();
      });
      return closed;
    },
  };
}

async function route(
  req: IncomingMessage,
  res: ServerResponse,
  context: RouteContext,
): Promise<void> {
  const path = new URL(req.url ?? '/', 'http://mock').pathname;
  if (await handleBatches(req, res, context.state.batches, context.requestId)) return;
  if (await handleBedrock(req, res, path, context)) return;
  if (await handleVertex(req, res, path, context)) return;
  const key = `${req.method ?? 'GET'} ${path}`;
  switch (key) {
    case 'POST /v1/messages':
      return handleMessages(req, res, context);
    case 'POST /v1/messages/count_tokens':
      return handleCountTokens(req, res, context);
    case 'GET /__stats':
      return sendJson(res, 200, context.state.stats.snapshot());
    case 'POST /__reset':
      await readBody(req);
      context.state.reset();
      return sendEmpty(res, 204);
    case 'POST /__faults':
      return handleSetFaults(req, res, context);
    default:
      await readBody(req);
      return sendJson(res, 404, apiErrorBody('not_found_error', 'Not found', context.requestId));
  }
}

async function handleCountTokens(
  req: IncomingMessage,
  res: ServerResponse,
  { state, requestId }: RouteContext,
): Promise<void> {
  state.stats.countTokensCall();
  const fail = (type: ApiErrorType, message: string) =>
    sendJson(res, ERROR_STATUS[type], apiErrorBody(type, message, requestId));

  const apiKey = apiKeyOf(req);
  const raw = await readBody(req);
  if (apiKey === undefined) {
    return fail('authentication_error', MISSING_KEY_MESSAGE);
  }
  if (raw === null) {
    return fail('request_too_large', TOO_LARGE_MESSAGE);
  }
  const body = parseJson(raw);
  if (!body) return fail('invalid_request_error', NOT_JSON_MESSAGE);
  const answer = await countTokensAnswer(body.value, state.options.inputCounting);
  if ('refused' in answer) return fail(answer.refused, answer.message);
  sendJson(res, 200, { input_tokens: answer.tokens });
}

async function handleSetFaults(
  req: IncomingMessage,
  res: ServerResponse,
  { state, requestId }: RouteContext,
): Promise<void> {
  const raw = await readBody(req);
  try {
    state.setFaults(raw === null || raw.trim() === '' ? {} : JSON.parse(raw));
  } catch (error) {
    const message =
      error instanceof LlmqError || error instanceof SyntaxError ? error.message : String(error);
    return sendJson(res, 400, apiErrorBody('invalid_request_error', message, requestId));
  }
  sendEmpty(res, 204);
}
