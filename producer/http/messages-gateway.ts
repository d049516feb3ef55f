import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ModelNotServedError, RequestValidationError } from '../../shared/errors.ts';
import { closeAfterAnswer } from '../../shared/http-limits.ts';
import { breakerKey, type QueueNames } from '../../shared/keys.ts';
import type { RedisClient } from '../../shared/redis.ts';
import type { RedisAuthThrottle } from '../../shared/redis-auth-throttle.ts';
import { countWorkers } from '../../shared/worker-presence.ts';
import { JobFailedError } from '../errors.ts';
import type { EnqueuedJob, Producer } from '../producer.ts';
import {
  type ApiErrorAnswer,
  apiError,
  deadLetterError,
  statusText,
  toApiError,
} from './anthropic-errors.ts';
import type { ApiKeyEntry, ApiKeyStore } from './api-keys.ts';
import { apiValidationError } from './api-validation.ts';
import type { CountTokensForwarder } from './count-tokens.ts';
import { INVALID_JSON, JSON_TOO_DEEP } from './fastify-adapter.ts';
import { gatewayCaller } from './gateway-auth.ts';
import { header, readCall, versionMissing } from './gateway-request.ts';
import { listModels, patternsOf, retrieveModel } from './models-route.ts';
import { noteCause, requestIdOf } from './server-errors.ts';
import { type CallOutcome, EventStreamReader, messageBody, relayEvents } from './sse-relay.ts';

export interface GatewayOptions {
  readonly producer: Producer;
  readonly keys: ApiKeyStore;
  /** Failed keys counted per address with every other route and server (none: not throttled). */
  readonly throttle?: RedisAuthThrottle | undefined;
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

/** Sends an answer with its status line as the API writes it (`529 Overloaded`). */
function withStatus(reply: FastifyReply, status: number): FastifyReply {
  reply.raw.statusMessage = statusText(status);
  return reply.code(status);
}

/** Sends an error in the API's shape, its body naming the answer's request-id. */
function send(reply: FastifyReply, a: ApiErrorAnswer): FastifyReply {
  return withStatus(reply, a.status)
    .headers(a.headers)
    .type('application/json')
    .send({ ...a.body, request_id: requestIdOf(reply) });
}

/** A refusal of the request's shape (not of its model, which the fleet may not serve). */
function isShapeRefusal(err: unknown): boolean {
  return err instanceof RequestValidationError && !(err instanceof ModelNotServedError);
}

/** The API's answer to what fastify refuses before a handler runs. */
function frameworkError(err: Error & { code?: string; statusCode?: number }): ApiErrorAnswer {
  switch (err.code) {
    case JSON_TOO_DEEP:
      return apiError('invalid_request_error', err.message);
    case INVALID_JSON:
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return apiError(
        'invalid_request_error',
        'There was an error parsing the body of your request: it is not valid JSON.',
      );
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return apiError('request_too_large', 'Request exceeds the maximum allowed number of bytes.');
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return apiError('invalid_request_error', 'send the body as application/json');
    default:
      if (err.statusCode !== undefined && err.statusCode >= 400 && err.statusCode < 500)
        return apiError('invalid_request_error', 'the request could not be read');
      return toApiError(err);
  }
}

/**
 * The drop-in Messages API's routes: `POST /v1/messages` (plain or streamed, through the
 * queue), `POST /v1/messages/count_tokens` (forwarded) and `GET /v1/models[/{id}]`, with the
 * API's error shapes.
 */
class MessagesGateway {
  readonly reader: EventStreamReader;
  private readonly maxWaitMs: number;
  private readonly pingMs: number;

  /** Who a request is: decided once, in the onRequest hook, and read by its handler. */
  private readonly callers = new WeakMap<FastifyRequest, Promise<ApiKeyEntry | ApiErrorAnswer>>();

  constructor(private readonly o: GatewayOptions) {
    this.maxWaitMs = o.maxWaitMs ?? 60_000;
    this.pingMs = o.pingMs ?? 5_000;
    this.reader = new EventStreamReader(o.redis, o.names);
  }

  /**
   * The tenant key's entry from `x-api-key` or `Authorization: Bearer` (both only when they
   * agree), or the 401; an address the throttle refuses gets a 429 whatever it sends, and a wrong
   * key counts against it. Once a request: the onRequest hook asks first, from the headers alone.
   */
  authenticate(req: FastifyRequest): Promise<ApiKeyEntry | ApiErrorAnswer> {
    let who = this.callers.get(req);
    if (!who) {
      who = this.identify(req);
      this.callers.set(req, who);
    }
    return who;
  }

  private async identify(req: FastifyRequest): Promise<ApiKeyEntry | ApiErrorAnswer> {
    const throttle = this.o.throttle;
    const verdict = await throttle?.check(req.ip);
    if (verdict && !verdict.ok) {
      const seconds = Math.max(1, Math.ceil(verdict.retryAfterMs / 1000));
      return apiError(
        'rate_limit_error',
        `llmq: too many failed authentications from this address: try again in ${seconds} s`,
        { 'retry-after': String(seconds) },
      );
    }
    const presented = {
      authorization: header(req, 'authorization'),
      'x-api-key': header(req, 'x-api-key'),
    };
    const who = gatewayCaller(this.o.keys, presented);
    if ('status' in who) {
      // A request without credentials is not a guess; a wrong or conflicting one is.
      if (presented.authorization !== undefined || presented['x-api-key'] !== undefined)
        await throttle?.failed(req.ip);
      return who;
    }
    return who;
  }

  /** Open breaker: the provider is failing, so the call is refused before it is queued. */
  private async breakerOpen(): Promise<ApiErrorAnswer | undefined> {
    // A pipeline, not MULTI: Redis out of memory refuses every command of a MULTI, reads too.
    const read = (await this.o.redis
      .pipeline()
      .hmget(breakerKey(this.o.names), 'state', 'open_until')
      .time()
      .exec()) as [[Error | null, (string | null)[]], [Error | null, [string, string]]];
    for (const [err] of read) if (err) throw err;
    const [[, h], [, t]] = read;
    const now = Number(t[0]) * 1000 + Math.floor(Number(t[1]) / 1000);
    const until = Number(h[1] ?? 0);
    if (h[0] !== 'open' || until <= now) return undefined;
    const retry = String(Math.max(1, Math.ceil((until - now) / 1000)));
    return apiError(
      'overloaded_error',
      'Overloaded (llmq: the provider is failing; the breaker is open)',
      { 'retry-after': retry },
    );
  }

  /** The 529 of a call cancelled before it started: why it did not start, as far as Redis tells. */
  private async notStarted(): Promise<ApiErrorAnswer> {
    const workers = await countWorkers(this.o.redis, this.o.names).catch(() => undefined);
    const why =
      workers === 0
        ? `no worker is running on queue ${this.o.names.queue} (start \`llmq worker\`)`
        : 'the budget had no room for it';
    return apiError(
      'overloaded_error',
      `Overloaded (llmq: ${why}; the call waited ${this.maxWaitMs / 1000} s without starting and was cancelled, never sent)`,
      { 'retry-after': '5' },
    );
  }

  /**
   * How the job ends for its caller: its result, the provider's error when it was
   * dead-lettered, a 529 when it had not started within `maxWaitMs` (it is cancelled then), or
   * `gone` when the caller left (the job is cancelled unless it started, or someone else's).
   */
  private async outcomeOf(job: EnqueuedJob, signal: AbortSignal): Promise<CallOutcome> {
    const { producer } = this.o;
    let cancelling: Promise<string> | undefined;
    const timer = setTimeout(() => {
      cancelling = producer.cancel(job.id).catch(() => 'unknown');
    }, this.maxWaitMs);
    try {
      const result = await producer.waitForResult(job.id, { signal });
      return { kind: 'done', message: result.message, requestId: result.requestId };
    } catch (err) {
      if (signal.aborted) {
        if (job.created) await producer.cancel(job.id).catch(() => {});
        return { kind: 'gone' };
      }
      if ((await cancelling) === 'cancelled')
        return { kind: 'error', error: await this.notStarted() };
      if (err instanceof JobFailedError) {
        return { kind: 'error', error: deadLetterError(err.reason, err.deadLetter) };
      }
      return { kind: 'error', error: toApiError(err) };
    } finally {
      clearTimeout(timer);
    }
  }

  /** `POST /v1/messages`: refused at once, or queued and answered as it ends. */
  async messages(req: FastifyRequest, reply: FastifyReply) {
    const who = await this.authenticate(req);
    if ('status' in who) return send(reply, who);
    const call = readCall(req, who);
    if ('status' in call) return send(reply, call);
    let job: EnqueuedJob;
    try {
      const open = await this.breakerOpen();
      if (open) return send(reply, open);
      job = await this.o.producer.enqueueJob(call.body, call.options);
    } catch (err) {
      // A body the producer refuses is answered in the API's words where llmq knows them.
      const reworded = isShapeRefusal(err) ? apiValidationError(call.body) : undefined;
      const a = reworded ?? toApiError(err);
      if (a.status >= 500) noteCause(req, err);
      const message = a.body.error.message.replace(/^idempotencyKey:/, 'idempotency-key:');
      return send(reply, { ...a, body: { ...a.body, error: { ...a.body.error, message } } });
    }
    return this.answer(reply, job, call.stream);
  }

  /** Answers a queued call: its stream relayed, or its Message, or its error, as it ends. */
  private async answer(reply: FastifyReply, job: EnqueuedJob, stream: boolean) {
    // The caller leaving is seen on the response's socket, before an answer was sent.
    const gone = new AbortController();
    reply.raw.once('close', () => {
      if (!reply.raw.writableFinished) gone.abort();
    });
    const shutdown = this.o.shutdown;
    const signal = shutdown ? AbortSignal.any([gone.signal, shutdown]) : gone.signal;
    const outcome = this.outcomeOf(job, signal);
    if (stream) {
      reply.hijack();
      await relayEvents({
        reader: this.reader,
        jobId: job.id,
        res: reply.raw,
        outcome,
        pingMs: this.pingMs,
        signal,
        requestId: requestIdOf(reply),
      });
      if (signal.aborted && !reply.raw.writableEnded) reply.raw.destroy();
      return;
    }
    const done = await outcome;
    if (done.kind === 'gone') {
      reply.hijack();
      reply.raw.destroy();
      return;
    }
    const jobHeader = { 'llmq-job-id': job.id };
    if (done.kind === 'error') {
      return send(reply, { ...done.error, headers: { ...done.error.headers, ...jobHeader } });
    }
    return withStatus(reply, 200)
      .headers({ ...jobHeader, ...(done.requestId ? { 'request-id': done.requestId } : {}) })
      .type('application/json')
      .send(messageBody(done.message));
  }

  /** `POST /v1/messages/count_tokens`: forwarded to the provider (501 when not set up). */
  async countTokens(req: FastifyRequest, reply: FastifyReply) {
    const who = await this.authenticate(req);
    if ('status' in who) return send(reply, who);
    const forwarder = this.o.countTokens;
    if (!forwarder) {
      return send(reply, {
        ...apiError(
          'api_error',
          'llmq: count_tokens is not set up on this server: start `llmq serve` with ANTHROPIC_API_KEY',
        ),
        status: 501,
      });
    }
    const a = await forwarder.forward(req.body, {
      version: header(req, 'anthropic-version'),
      beta: header(req, 'anthropic-beta'),
      tenant: who.tenant,
    });
    return withStatus(reply, a.status).headers(a.headers).type('application/json').send(a.body);
  }

  /** `GET /v1/models[/{id}]`: the models of the fleet's per-model limits. */
  async models(req: FastifyRequest, reply: FastifyReply) {
    const who = await this.authenticate(req);
    if ('status' in who) return send(reply, who);
    let patterns: string[];
    try {
      patterns = patternsOf((await this.o.producer.loadLimits()).scopes);
    } catch (err) {
      return send(reply, toApiError(err));
    }
    const id = (req.params as { id?: string }).id;
    const a =
      id === undefined
        ? listModels(patterns, req.query as Record<string, string | undefined>)
        : retrieveModel(patterns, id);
    if (a.status !== 200) return send(reply, a as ApiErrorAnswer);
    return withStatus(reply, 200).type('application/json').send(a.body);
  }
}

/** Mounts the drop-in Messages API (see {@link MessagesGateway}); returns what must be closed with the server. */
export function mountMessagesGateway(
  app: FastifyInstance,
  options: GatewayOptions,
): { close(): Promise<void> } {
  const gateway = new MessagesGateway(options);
  void app.register(async (scope) => {
    // Every answer carries a request-id (server-errors.ts), as the API's do (the provider's own
    // where it gave one). A request without a valid key is refused from its headers, before its
    // body is read, and its connection closed.
    // A request without anthropic-version is refused next, as the API refuses it.
    scope.addHook('onRequest', async (req, reply) => {
      const who = await gateway.authenticate(req);
      const refused = 'status' in who ? who : versionMissing(req);
      if (!refused) return;
      closeAfterAnswer(req, reply);
      return send(reply, refused);
    });
    scope.setErrorHandler((err: Error, _req, reply) => send(reply, frameworkError(err)));
    scope.post('/v1/messages', (req, reply) => gateway.messages(req, reply));
    scope.post('/v1/messages/count_tokens', (req, reply) => gateway.countTokens(req, reply));
    scope.get('/v1/models', (req, reply) => gateway.models(req, reply));
    scope.get('/v1/models/:id', (req, reply) => gateway.models(req, reply));
  });
  return { close: () => gateway.reader.close() };
}
