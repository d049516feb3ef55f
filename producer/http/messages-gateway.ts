import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { breakerKey, type QueueNames } from '../../shared/keys.ts';
import { resolvePriority } from '../../shared/priority.ts';
import type { RedisClient } from '../../shared/redis.ts';
import { JobFailedError } from '../errors.ts';
import type { EnqueuedJob, Producer } from '../producer.ts';
import { type ApiErrorAnswer, apiError, deadLetterError, toApiError } from './anthropic-errors.ts';
import type { ApiKeyStore } from './api-keys.ts';
import type { CountTokensForwarder } from './count-tokens.ts';
import { INVALID_JSON, JSON_TOO_DEEP } from './fastify-adapter.ts';
import { gatewayCaller } from './gateway-auth.ts';
import { type CallOutcome, EventStreamReader, messageBody, relayEvents } from './sse-relay.ts';

export interface GatewayOptions {
  readonly producer: Producer;
  readonly keys: ApiKeyStore;
  /** A connection for the breaker's state and the relays' wakes (leased copies block on reads). */
  readonly redis: RedisClient;
  readonly names: QueueNames;
  /** A call not started after this long is cancelled and answered 529. @default 60_000 */
  readonly maxWaitMs?: number;
  /** A streamed call's ping interval while it waits. @default 5_000 */
  readonly pingMs?: number;
  /** Answers `POST /v1/messages/count_tokens`; without it that route answers 501. */
  readonly countTokens?: CountTokensForwarder | undefined;
  /** Ends every relay and wait (the server is closing): as if each caller had left. */
  readonly shutdown?: AbortSignal | undefined;
}

/** Top-level fields of a Messages request the API accepts; any other is refused, as it does. */
const KNOWN_FIELDS = new Set([
  'model',
  'messages',
  'max_tokens',
  'system',
  'metadata',
  'stop_sequences',
  'stream',
  'temperature',
  'top_k',
  'top_p',
  'tools',
  'tool_choice',
  'thinking',
  'service_tier',
  'container',
  'context_management',
  'mcp_servers',
  'output_config',
  'output_format',
  'inference_geo',
]);

function header(req: FastifyRequest, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v.join(',') : v;
}

function send(reply: FastifyReply, a: ApiErrorAnswer): FastifyReply {
  return reply.code(a.status).headers(a.headers).type('application/json').send(a.body);
}

/**
 * Mounts the drop-in Messages API: `POST /v1/messages` (plain or streamed, through the queue)
 * and `POST /v1/messages/count_tokens` (forwarded), with the API's error shapes. Returns what
 * must be closed with the server.
 */
export function mountMessagesGateway(
  app: FastifyInstance,
  options: GatewayOptions,
): { close(): Promise<void> } {
  const { producer, keys } = options;
  const maxWaitMs = options.maxWaitMs ?? 60_000;
  const pingMs = options.pingMs ?? 5_000;
  const reader = new EventStreamReader(options.redis, options.names);

  /** The tenant key's entry from `x-api-key` or `Authorization: Bearer`, or the 401. */
  function authenticate(req: FastifyRequest) {
    return gatewayCaller(keys, {
      authorization: header(req, 'authorization'),
      'x-api-key': header(req, 'x-api-key'),
    });
  }

  /** Open breaker: the provider is failing, so the call is refused before it is queued. */
  async function breakerOpen(): Promise<ApiErrorAnswer | undefined> {
    // A pipeline, not MULTI: Redis out of memory refuses every command of a MULTI, reads too.
    const read = (await options.redis
      .pipeline()
      .hmget(breakerKey(options.names), 'state', 'open_until')
      .time()
      .exec()) as [[Error | null, (string | null)[]], [Error | null, [string, string]]];
    for (const [err] of read) if (err) throw err;
    const [[, h], [, t]] = read;
    const now = Number(t[0]) * 1000 + Math.floor(Number(t[1]) / 1000);
    const until = Number(h[1] ?? 0);
    if (h[0] !== 'open' || until <= now) return undefined;
    return apiError(
      'overloaded_error',
      'Overloaded (llmq: the provider is failing; the breaker is open)',
      {
        'retry-after': String(Math.max(1, Math.ceil((until - now) / 1000))),
      },
    );
  }

  /**
   * How the job ends for its caller: its result, the provider's error when it was
   * dead-lettered, a 529 when it had not started within `maxWaitMs` (it is cancelled then), or
   * `gone` when the caller left (the job is cancelled unless it started, or someone else's).
   */
  async function outcomeOf(job: EnqueuedJob, signal: AbortSignal): Promise<CallOutcome> {
    let cancelling: Promise<string> | undefined;
    const timer = setTimeout(() => {
      cancelling = producer.cancel(job.id).catch(() => 'unknown');
    }, maxWaitMs);
    try {
      const result = await producer.waitForResult(job.id, { signal });
      return { kind: 'done', message: result.message, requestId: result.requestId };
    } catch (err) {
      if (signal.aborted) {
        if (job.created) await producer.cancel(job.id).catch(() => {});
        return { kind: 'gone' };
      }
      if ((await cancelling) === 'cancelled') {
        return {
          kind: 'error',
          error: apiError(
            'overloaded_error',
            `Overloaded (llmq: the call waited ${maxWaitMs / 1000} s for budget without starting and was cancelled, never sent)`,
            { 'retry-after': '5' },
          ),
        };
      }
      if (err instanceof JobFailedError) {
        return { kind: 'error', error: deadLetterError(err.reason, err.deadLetter) };
      }
      return { kind: 'error', error: toApiError(err) };
    } finally {
      clearTimeout(timer);
    }
  }

  async function messages(req: FastifyRequest, reply: FastifyReply) {
    const who = authenticate(req);
    if ('status' in who) return send(reply, who);
    const body = req.body;
    if (body === null || typeof body !== 'object' || Array.isArray(body)) {
      return send(reply, apiError('invalid_request_error', 'the body must be a JSON object'));
    }
    const unknown = Object.keys(body).find((k) => !KNOWN_FIELDS.has(k));
    if (unknown !== undefined) {
      return send(
        reply,
        apiError('invalid_request_error', `${unknown}: Extra inputs are not permitted`),
      );
    }
    const asked = header(req, 'llmq-priority');
    let priority: string | number;
    try {
      priority = asked ?? who.priority ?? 'interactive';
      resolvePriority(priority);
    } catch (err) {
      return send(
        reply,
        apiError('invalid_request_error', `llmq-priority: ${(err as Error).message}`),
      );
    }
    const providerHeaders: Record<string, string> = {};
    for (const name of ['anthropic-version', 'anthropic-beta']) {
      const v = header(req, name);
      if (v !== undefined) providerHeaders[name] = v;
    }
    const stream = (body as { stream?: unknown }).stream === true;
    const idempotencyKey = header(req, 'idempotency-key');
    let job: EnqueuedJob;
    try {
      const open = await breakerOpen();
      if (open) return send(reply, open);
      job = await producer.enqueueJob(body, {
        tenant: who.tenant,
        priority,
        ...(who.maxPriority !== undefined ? { maxPriority: who.maxPriority } : {}),
        relayEvents: stream,
        providerHeaders,
        ...(idempotencyKey !== undefined ? { idempotencyKey } : {}),
      });
    } catch (err) {
      const a = toApiError(err);
      return send(reply, {
        ...a,
        body: {
          ...a.body,
          error: {
            ...a.body.error,
            message: a.body.error.message.replace(/^idempotencyKey:/, 'idempotency-key:'),
          },
        },
      });
    }
    // The caller leaving is seen on the response's socket, before an answer was sent.
    const gone = new AbortController();
    reply.raw.once('close', () => {
      if (!reply.raw.writableFinished) gone.abort();
    });
    const signal = options.shutdown
      ? AbortSignal.any([gone.signal, options.shutdown])
      : gone.signal;
    const outcome = outcomeOf(job, signal);
    if (stream) {
      reply.hijack();
      await relayEvents({ reader, jobId: job.id, res: reply.raw, outcome, pingMs, signal });
      if (signal.aborted && !reply.raw.writableEnded) reply.raw.destroy();
      return;
    }
    const done = await outcome;
    if (done.kind === 'gone') {
      reply.hijack();
      reply.raw.destroy();
      return;
    }
    if (done.kind === 'error')
      return send(reply, {
        ...done.error,
        headers: { ...done.error.headers, 'llmq-job-id': job.id },
      });
    return reply
      .code(200)
      .headers({
        'llmq-job-id': job.id,
        ...(done.requestId ? { 'request-id': done.requestId } : {}),
      })
      .type('application/json')
      .send(messageBody(done.message));
  }

  async function countTokens(req: FastifyRequest, reply: FastifyReply) {
    const who = authenticate(req);
    if ('status' in who) return send(reply, who);
    if (!options.countTokens) {
      return send(reply, {
        ...apiError(
          'api_error',
          'llmq: count_tokens is not set up on this server: start `llmq serve` with ANTHROPIC_API_KEY',
        ),
        status: 501,
      });
    }
    const a = await options.countTokens.forward(req.body, {
      version: header(req, 'anthropic-version'),
      beta: header(req, 'anthropic-beta'),
      tenant: who.tenant,
    });
    return reply.code(a.status).headers(a.headers).type('application/json').send(a.body);
  }

  void app.register(async (scope) => {
    // The API's error shapes for what fastify refuses before a handler runs.
    scope.setErrorHandler((err: Error & { code?: string; statusCode?: number }, _req, reply) => {
      switch (err.code) {
        case JSON_TOO_DEEP:
          return send(reply, apiError('invalid_request_error', err.message));
        case INVALID_JSON:
        case 'FST_ERR_CTP_EMPTY_JSON_BODY':
          return send(
            reply,
            apiError(
              'invalid_request_error',
              'There was an error parsing the body of your request: it is not valid JSON.',
            ),
          );
        case 'FST_ERR_CTP_BODY_TOO_LARGE':
          return send(
            reply,
            apiError('request_too_large', 'Request exceeds the maximum allowed number of bytes.'),
          );
        case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
          return send(
            reply,
            apiError('invalid_request_error', 'send the body as application/json'),
          );
        default:
          if (err.statusCode !== undefined && err.statusCode >= 400 && err.statusCode < 500)
            return send(reply, apiError('invalid_request_error', 'the request could not be read'));
          return send(reply, toApiError(err));
      }
    });
    scope.post('/v1/messages', messages);
    scope.post('/v1/messages/count_tokens', countTokens);
  });
  return { close: () => reader.close() };
}
