import { STATUS_CODES } from 'node:http';
import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify';
import type { Config } from '../../shared/config.ts';
import { redactUrl } from '../../shared/errors.ts';
import { capConnections, type ServerLimits, serverLimitOptions } from '../../shared/http-limits.ts';
import { connectRedis, type RedisClient } from '../../shared/redis.ts';
import {
  RedisAuthThrottle,
  type RedisAuthThrottleOptions,
} from '../../shared/redis-auth-throttle.ts';
import { ThrottledWarning } from '../../shared/telemetry/throttled-warning.ts';
import { createProducer } from '../create-producer.ts';
import type { Producer, ProducerOptions } from '../producer.ts';
import { newRequestId } from './anthropic-errors.ts';
import { ApiKeyStore } from './api-keys.ts';
import { CountTokensForwarder } from './count-tokens.ts';
import { mountRoutes } from './fastify-adapter.ts';
import { type ApiErrorCode, apiKeyAuth, errorResponse } from './handlers.ts';
import { healthRoutes } from './health-routes.ts';
import { createRoutes } from './job-routes.ts';
import { mountMessagesGateway } from './messages-gateway.ts';
import { type ServerErrorSink, trackServerErrors } from './server-errors.ts';

/**
 * What the HTTP API serves: the queue of `config`, to the keys in `apiKeys`, on `host:port`.
 *
 * @example
 * ```ts
 * const options: HttpApiOptions = {
 *   config: resolveConfig({ env: process.env }),
 *   apiKeys: process.env.LLMQ_API_KEYS ?? '', // tenant:sha256hex,…
 *   port: 8080,
 * };
 * ```
 */
export interface HttpApiOptions {
  /** Where the queue is (redisUrl, queue, prefix, maxDepth, limits). */
  readonly config: Config;
  /** The accepted keys, or a `tenant:sha256hex,…` spec. */
  readonly apiKeys: ApiKeyStore | string;
  /** @default '127.0.0.1' (only this machine; pass '0.0.0.0' to listen everywhere) */
  readonly host?: string;
  /** 0 picks a free port. @default 8080 */
  readonly port?: number;
  /** Largest body accepted, in bytes. @default config.bodyLimit (32 MB) */
  readonly bodyLimit?: number;
  /** Header, body and idle timeouts, and the connection cap. @default see ServerLimits */
  readonly limits?: ServerLimits;
  /**
   * Where the server's warnings go (Redis out of memory, once a minute at most), and one line
   * for each 5xx answer, by its request id (to `error` when the logger has one).
   */
  readonly logger?: ServerErrorSink;
  /** Longest `/wait` long-poll in ms. @default 60_000 */
  readonly maxWaitMs?: number;
  /** A Redis command that takes longer answers 503. @default 5_000 */
  readonly commandTimeoutMs?: number;
  /**
   * Failed authentications per address before it is refused for a while, on every route that
   * takes a key, counted in Redis with every other server of the prefix. @default {} (after 5
   * failures, 1 s doubling up to 60 s)
   */
  readonly authThrottle?: RedisAuthThrottleOptions;
  /** The drop-in Messages API (`POST /v1/messages`, docs/gateway.md). */
  readonly gateway?: {
    /** A call not started after this long is cancelled and answered 529. @default maxWaitMs */
    readonly maxWaitMs?: number;
    /** A waiting stream's ping interval. @default 5_000 */
    readonly pingMs?: number;
    /**
     * count_tokens requests per minute forwarded (with config's ANTHROPIC_API_KEY), for every
     * tenant together; each tenant has its keys file's `count-tokens-rpm`, else an equal share.
     * @default 100
     */
    readonly countTokensRpm?: number;
  };
  /** More producer settings (tenantMaxDepth, retryAfterMs, …). */
  readonly producer?: Partial<Omit<ProducerOptions, 'redis' | 'names'>>;
}

/**
 * A running HTTP API: where it listens, and how to stop it.
 *
 * @example
 * ```ts
 * const api = await startHttpApi({ config, apiKeys, port: 0 });
 * console.log(`${api.url}/openapi.json`);
 * await api.close();
 * ```
 */
export interface HttpApi {
  /** `http://host:port` */
  readonly url: string;
  /** The producer behind it. */
  readonly producer: Producer;
  /** Stops listening, then closes the producer and its connection. */
  close(): Promise<void>;
}

/** The fastify server with its limits, and Node's and fastify's refusals in the API's format. */
function newServer(options: HttpApiOptions): FastifyInstance {
  return Fastify({
    ...serverLimitOptions(options.limits),
    logger: false,
    bodyLimit: options.bodyLimit ?? options.config.bodyLimit,
    return503OnClosing: true,
    // A URL that does not decode (`/%`) is answered before any route or hook runs.
    frameworkErrors: (_err, _req, reply) =>
      (reply as FastifyReply)
        .code(400)
        .type('application/json; charset=utf-8')
        .header('cache-control', 'no-store')
        .send(
          JSON.stringify({
            ...(errorResponse(400, 'invalid_request', 'the URL could not be decoded')
              .body as object),
            request_id: newRequestId(),
          }),
        ),
    // What Node's parser refuses (headers too large, a malformed request line) still answers
    // in the API's error format.
    clientErrorHandler: (err: Error & { code?: string }, socket) => {
      if (err.code === 'ECONNRESET' || socket.destroyed) return;
      const [status, code, message]: [number, ApiErrorCode, string] =
        err.code === 'HPE_HEADER_OVERFLOW'
          ? [431, 'headers_too_large', 'the request headers are larger than this server accepts']
          : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
            ? [408, 'request_timeout', 'the request took too long to arrive']
            : [400, 'invalid_request', 'the request could not be read as HTTP'];
      const body = JSON.stringify({
        ...(errorResponse(status, code, message).body as object),
        request_id: newRequestId(),
      });
      // Not after an answer already sent on this connection (bytes after a `Connection: close`).
      if (socket.writable && !socket.writableEnded) {
        socket.write(
          `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nConnection: close\r\nContent-Type: application/json; charset=utf-8\r\n` +
            `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
        );
      }
      socket.destroy();
    },
  });
}

/** The count_tokens forwarder (with the workers' key), or undefined when there is no key. */
function countTokensOf(
  options: HttpApiOptions,
  keys: ApiKeyStore,
  redis: RedisClient,
  onRedisOutOfMemory: () => void,
): CountTokensForwarder | undefined {
  const apiKey = options.config.anthropicApiKey;
  if (!apiKey) return undefined;
  const rpm = options.gateway?.countTokensRpm ?? 100;
  return new CountTokensForwarder({
    redis,
    names: { prefix: options.config.prefix, queue: options.config.queue },
    apiKey,
    baseURL: options.config.anthropicBaseUrl,
    rpm,
    // A tenant's own budget, else an equal share: one tenant never spends the others'.
    tenantRpm: (tenant) =>
      keys.limitsOf(tenant).countTokensRpm ??
      Math.max(1, Math.floor(rpm / Math.max(1, keys.tenants.length))),
    onRedisOutOfMemory,
  });
}

/**
 * Starts the HTTP enqueue API (fastify): `POST /v1/jobs`, waiting and status, and the drop-in
 * Messages gateway `POST /v1/messages` (docs/gateway.md); routes and error codes are in
 * `GET /openapi.json`. Its Redis connection fails fast (no offline queue, one retry per command
 * in flight, then 503) instead of holding requests while Redis is down. `llmq serve` runs it.
 *
 * @example
 * ```ts
 * const api = await startHttpApi({
 *   config: resolveConfig({ env: process.env }),
 *   apiKeys: 'acme:' + createHash('sha256').update(process.env.ACME_KEY ?? '').digest('hex'),
 *   host: '0.0.0.0',
 * });
 * ```
 */
export async function startHttpApi(options: HttpApiOptions): Promise<HttpApi> {
  const keys =
    typeof options.apiKeys === 'string' ? ApiKeyStore.parse(options.apiKeys) : options.apiKeys;
  const outOfMemory = new ThrottledWarning(
    options.logger,
    `Redis at ${redactUrl(options.config.redisUrl)} is out of memory (maxmemory reached): requests are answered 503 and nothing is written; raise maxmemory or lower LLMQ_MAX_DEPTH_BYTES`,
  );
  const producer = await openProducer(options, keys, () => outOfMemory.hit());
  const app = newServer(options);
  trackServerErrors(app, options.logger);
  capConnections(app.server, options.limits);
  const shutdown = new AbortController();
  const gatewayRedis = connectRedis(options.config.redisUrl, {
    maxRetriesPerRequest: 1,
    connectTimeout: 2_000,
  });
  gatewayRedis.on('error', () => {});
  const throttle = new RedisAuthThrottle(gatewayRedis, options.config.prefix, options.authThrottle);
  const authenticate = apiKeyAuth(keys, throttle);
  mountRoutes(
    app,
    [
      ...createRoutes({
        producer,
        authenticate,
        ...(options.maxWaitMs !== undefined ? { maxWaitMs: options.maxWaitMs } : {}),
      }),
      ...healthRoutes({ redis: gatewayRedis, shutdown: shutdown.signal }),
    ],
    { shutdown: shutdown.signal, authenticate },
  );
  const g = options.gateway ?? {};
  const gateway = mountMessagesGateway(app, {
    producer,
    keys,
    throttle,
    redis: gatewayRedis,
    names: { prefix: options.config.prefix, queue: options.config.queue },
    shutdown: shutdown.signal,
    maxWaitMs: g.maxWaitMs ?? options.maxWaitMs ?? 60_000,
    ...(g.pingMs !== undefined ? { pingMs: g.pingMs } : {}),
    countTokens: countTokensOf(options, keys, gatewayRedis, () => outOfMemory.hit()),
  });
  const closeGateway = async () => {
    await gateway.close();
    gatewayRedis.disconnect();
  };
  try {
    await app.listen({ host: options.host ?? '127.0.0.1', port: options.port ?? 8080 });
  } catch (err) {
    await closeGateway();
    await producer.close();
    throw err;
  }
  let closing: Promise<void> | undefined;
  return {
    url: urlOf(app, options),
    producer,
    close: () => {
      closing ??= (async () => {
        // Long polls answer first (with the job's state now), then the server closes, then Redis.
        shutdown.abort();
        await app.close();
        await closeGateway();
        await producer.close();
      })();
      return closing;
    },
  };
}

/** The server's producer: its Redis fails fast, its bounds per tenant are the keys file's. */
async function openProducer(options: HttpApiOptions, keys: ApiKeyStore, onOom: () => void) {
  const producer = createProducer(options.config, {
    commandTimeoutMs: options.commandTimeoutMs ?? 5_000,
    // No offline queue: a command is refused at once while Redis is down, never run later, when
    // it is back, after the caller was answered 503 (a cancel would strand its job).
    redisOptions: { maxRetriesPerRequest: 1, connectTimeout: 2_000, enableOfflineQueue: false },
    tenantMaxDepth: keys.tenantBounds('maxWaiting'),
    tenantMaxBytes: keys.tenantBounds('maxBytes'),
    onRedisOutOfMemory: onOom,
    ...options.producer,
  });
  // Without an offline queue, a request before the connection is ready would be refused; one
  // that stays down is answered 503 per request instead of failing the start.
  await producer.ready().catch(() => {});
  // Cancels an earlier server took out but never removed (it died between the two).
  await producer.finishStrandedCancels().catch(() => {});
  return producer;
}

/** Where the server listens, as a URL (an IPv6 host in brackets). */
function urlOf(app: ReturnType<typeof newServer>, options: HttpApiOptions): string {
  const addr = app.server.address();
  const port = typeof addr === 'object' && addr ? addr.port : options.port;
  const host = options.host ?? '127.0.0.1';
  return `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
}
