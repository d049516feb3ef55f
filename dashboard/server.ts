import type { BudgetLimits } from '../shared/budgets.ts';
import type { HeldBounds } from '../shared/held.ts';
/**
 * The dashboard's HTTP server: the overview at `/overview` (tenants' and models' pages at
 * `/tenant`, `/model`; their JSON at `/api/overview`, `/api/usage`), Bull Board at `/`, the
 * limiter's live page at `/limiter` (its JSON at `/api/limiter`), Prometheus text at `/metrics`. Every path needs credentials (see
 * `auth.ts`); the server binds to 127.0.0.1 unless told otherwise.
 */

import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify';
import { Producer } from '../producer/producer.ts';
import { AuthThrottle, type AuthThrottleOptions } from '../shared/auth-throttle.ts';
import { LlmqError } from '../shared/errors.ts';
import { capConnections, type ServerLimits, serverLimitOptions } from '../shared/http-limits.ts';
import type { RedisClient } from '../shared/redis.ts';
import { connectRedis } from '../shared/redis.ts';
import { AccessGuard, type DashboardAuth } from './auth.ts';
import { type Board, mountBoard } from './board.ts';
import { FleetReader } from './fleet-reader.ts';
import { registerPages } from './page-routes.ts';
import { registerProbes } from './probe-routes.ts';
import { PrometheusExporter } from './prometheus.ts';
import { guardRequests } from './request-guard.ts';
import { capTenants, DEFAULT_METRICS_TENANTS } from './tenant-cap.ts';
import { registerPageApi } from './usage-api.ts';

/**
 * What the dashboard shows (the queues under `prefix`) and where it listens; every option has a
 * default.
 *
 * @example
 * ```ts
 * const options: DashboardOptions = {
 *   redisUrl: config.redisUrl,
 *   prefix: config.prefix,
 *   readOnly: true,
 *   auth: { user: 'ops', password: process.env.LLMQ_DASHBOARD_PASSWORD },
 * };
 * ```
 * @inlineType DashboardAuth
 */
export interface DashboardOptions {
  /** A connection the dashboard uses but does not own; without it one is opened from `redisUrl`. */
  readonly redis?: RedisClient;
  /** @default 'redis://127.0.0.1:6379' */
  readonly redisUrl?: string;
  /** Prefix of the queues to show. @default 'llmq' */
  readonly prefix?: string;
  /** Interface to bind. @default '127.0.0.1' */
  readonly host?: string;
  /** Port to listen on; 0 picks a free one (read it from `url`). @default 3000 */
  readonly port?: number;
  /** Hide and refuse Bull Board's actions (retry, promote, clean, …). @default false */
  readonly readOnly?: boolean;
  /**
   * Who may look. With no credential at all a one-time random token is made, returned as
   * `token` and carried by `url`.
   * @default {}
   * @example { user: 'ops', password: process.env.LLMQ_DASHBOARD_PASSWORD }
   */
  readonly auth?: DashboardAuth;
  /** The queues' depth bound, shown against their depth (and kept by "add job"); 0 is unbounded. @default 10_000 */
  readonly maxDepth?: number;
  /** The queues' bound in bytes of waiting requests, kept by "add job"; 0 is unbounded. @default 0 */
  readonly maxDepthBytes?: number;
  /** The bounds on what a queue holds in Redis, shown against what it holds. */
  readonly heldBounds?: HeldBounds | undefined;
  /** Header, body and idle timeouts, and the connection cap. @default see ServerLimits */
  readonly limits?: ServerLimits;
  /** Money budgets (Config.budgets), shown against spend on the limiter page and in /metrics. */
  readonly budgets?: Readonly<Record<string, BudgetLimits>> | undefined;
  /**
   * Tenants `/metrics` names, the busiest first; the rest are summed as `other`.
   * @default 10
   */
  readonly metricsTenants?: number;
  /** How often the registry of queues is re-read besides page loads, ms. @default 5_000 */
  readonly rescanMs?: number;
  /** The queue the limiter page opens on (LLMQ_QUEUE); without it, the busiest one. */
  readonly queue?: string | undefined;
  /**
   * Failed logins per address before it is refused for a while (in this process's memory).
   * @default {} (5 failures, then 1 s doubling up to 60 s)
   */
  readonly authThrottle?: AuthThrottleOptions;
}

/**
 * A running dashboard: the URL to open, and how to stop it.
 *
 * @example
 * ```ts
 * const dash = await startDashboard({ port: 0 });
 * console.log(dash.url); // carries ?token= when the token was generated
 * await dash.close();
 * ```
 */
export interface DashboardHandle {
  /**
   * Where to open the dashboard: its overview, `http://127.0.0.1:PORT/overview`, carrying
   * `?token=` when the token was generated (like Jupyter), since nobody else knows it.
   */
  readonly url: string;
  /** `http://host:port`, without path or token. */
  readonly baseUrl: string;
  /** The bearer token in effect (generated or given); absent under Basic auth alone. */
  readonly token: string | undefined;
  /** Stops serving, closes the queues it opened and the connection it owns. */
  close(): Promise<void>;
}

/** The listening options, checked. */
function checked(options: DashboardOptions) {
  const host = options.host ?? '127.0.0.1';
  const port = options.port ?? 3000;
  if (!Number.isInteger(port) || port < 0 || port > 65_535) {
    throw new TypeError(`port must be a whole number from 0 to 65535, got ${port}`);
  }
  const rescanMs = options.rescanMs ?? 5_000;
  if (!(rescanMs >= 100)) throw new TypeError(`rescanMs must be at least 100, got ${rescanMs}`);
  const tenants = options.metricsTenants ?? DEFAULT_METRICS_TENANTS;
  if (!Number.isInteger(tenants) || tenants < 0) {
    throw new TypeError(`metricsTenants must be a whole number from 0 up, got ${tenants}`);
  }
  return { host, port, rescanMs, tenants };
}

/** `GET /metrics`: every queue's view in Prometheus text. */
function registerMetrics(
  app: FastifyInstance,
  board: Board,
  reader: FleetReader,
  tenants: number,
): void {
  const exporter = new PrometheusExporter();
  app.get('/metrics', async (_req, reply) => {
    const queues = await board.refresh();
    const views = await Promise.all(queues.map((q) => reader.read(q)));
    const text = await exporter.render(views.map((v) => capTenants(v, tenants)));
    return reply.type(exporter.registry.contentType).header('cache-control', 'no-store').send(text);
  });
}

/** A 503 while Redis (or the limiter) cannot answer, else a 500; the code and message in JSON. */
function errorReply(err: unknown, reply: FastifyReply) {
  const redisDown =
    err instanceof Error &&
    (err.name === 'MaxRetriesPerRequestError' ||
      /Connection is closed|ECONNREFUSED/.test(err.message));
  const unavailable =
    redisDown ||
    (err instanceof LlmqError &&
      (err.code === 'REDIS_UNAVAILABLE' || err.code === 'LIMITER_UNAVAILABLE'));
  const code = err instanceof LlmqError ? err.code : redisDown ? 'REDIS_UNAVAILABLE' : 'INTERNAL';
  return reply
    .code(unavailable ? 503 : 500)
    .send({ error: { code, message: err instanceof Error ? err.message : String(err) } });
}

/**
 * Bull Board's "add job" enqueues through a producer of the queue, validated like any other:
 * one per queue, made when first needed.
 */
function producers(redis: RedisClient, prefix: string, options: DashboardOptions) {
  const made = new Map<string, Producer>();
  const producerFor = (queue: string): Producer => {
    let p = made.get(queue);
    if (!p) {
      p = new Producer({
        redis,
        names: { prefix, queue },
        maxDepth: options.maxDepth ?? 10_000,
        maxDepthBytes: options.maxDepthBytes ?? 0,
      });
      made.set(queue, p);
    }
    return p;
  };
  const closeProducers = () => Promise.all([...made.values()].map((p) => p.close()));
  return { producerFor, closeProducers };
}

function displayHost(host: string): string {
  if (host === '0.0.0.0' || host === '::' || host === '') return '127.0.0.1';
  return host.includes(':') ? `[${host}]` : host;
}

/**
 * Starts the dashboard and resolves once it listens.
 *
 * @example
 * const dash = await startDashboard({ prefix: 'llmq', port: 0 });
 * console.log(dash.url); // http://127.0.0.1:40211/overview?token=…
 */
export async function startDashboard(options: DashboardOptions = {}): Promise<DashboardHandle> {
  const { host, port, rescanMs, tenants } = checked(options);
  const guard = new AccessGuard(options.auth ?? {});
  const throttle = new AuthThrottle(options.authThrottle);
  const readOnly = options.readOnly ?? false;
  const ownsRedis = options.redis === undefined;
  // No worker runs on this connection: commands may fail fast (a 503) instead of queueing
  // while Redis is away, so a scrape or a page poll never hangs.
  const redis =
    options.redis ??
    connectRedis(options.redisUrl ?? 'redis://127.0.0.1:6379', { maxRetriesPerRequest: 1 });
  // Reconnection is ioredis's job; requests meanwhile answer 503.
  if (ownsRedis) redis.on('error', () => {});
  const reader = new FleetReader({
    redis,
    prefix: options.prefix ?? 'llmq',
    maxDepth: options.maxDepth,
    budgets: options.budgets,
    heldBounds: options.heldBounds,
  });
  const app = Fastify({
    ...serverLimitOptions(options.limits),
    logger: false,
    forceCloseConnections: true,
  });
  capConnections(app.server, options.limits);
  const { producerFor, closeProducers } = producers(redis, reader.prefix, options);
  let timer: NodeJS.Timeout | undefined;

  try {
    guardRequests(app, { guard, throttle, readOnly });

    app.setErrorHandler((err, _req, reply) => errorReply(err, reply));

    const board = await mountBoard(app, { reader, readOnly, producerFor });

    registerPages(app, readOnly);
    registerPageApi(app, { reader, board, queue: options.queue });

    registerMetrics(app, board, reader, tenants);
    registerProbes(app, redis);

    await app.listen({ host, port });
    timer = setInterval(() => void board.refresh(true).catch(() => {}), rescanMs);
    timer.unref();
  } catch (err) {
    await app.close().catch(() => {});
    await closeProducers().catch(() => {});
    await reader.close().catch(() => {});
    if (ownsRedis) redis.disconnect();
    throw err;
  }

  const address = app.server.address();
  const boundPort = typeof address === 'object' && address ? address.port : port;
  const baseUrl = `http://${displayHost(host)}:${boundPort}`;
  let closing: Promise<void> | undefined;
  return {
    url: guard.generated
      ? `${baseUrl}/overview?token=${encodeURIComponent(guard.token!)}`
      : `${baseUrl}/overview`,
    baseUrl,
    token: guard.token,
    close() {
      closing ??= (async () => {
        clearInterval(timer);
        await app.close();
        await closeProducers();
        await reader.close();
        if (ownsRedis) await redis.quit().catch(() => redis.disconnect());
      })();
      return closing;
    },
  };
}
