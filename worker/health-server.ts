/**
 * A worker's probes over HTTP, for Kubernetes and the like (`llmq worker --health-port N`):
 * `GET /healthz` (alive: its gate loop turns), `GET /readyz` (Redis answers, the fleet's limits
 * are its own, not draining) and `GET /metrics` (this process, Prometheus text). A probe answers
 * 200 or 503 with `{ "status", "reasons"? }`.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FleetLimits } from '../shared/fleet-limits.ts';
import type { QueueNames } from '../shared/keys.ts';
import { type ProbeVerdict, probeAnswer } from '../shared/probes.ts';
import type { RedisClient } from '../shared/redis.ts';
import { liveness, readiness } from './health-checks.ts';
import { workerProcessMetrics } from './process-metrics.ts';
import type { WorkerHandle } from './worker-options.ts';

export interface HealthServerOptions {
  readonly worker: Pick<WorkerHandle, 'health'>;
  /** The worker's connection: /readyz asks it PING and the fleet's limits. */
  readonly redis: RedisClient;
  readonly names: QueueNames;
  /** The limits the worker runs with. */
  readonly limits: FleetLimits;
  readonly port: number;
  /** Kubernetes probes reach the pod's address: bind 0.0.0.0 there. @default '127.0.0.1' */
  readonly host?: string;
  /** A gate step longer than this fails /healthz. @default 600_000 */
  readonly stallMs?: number;
  /** How long /readyz waits for Redis's PING. @default 2_000 */
  readonly redisTimeoutMs?: number;
}

export interface HealthServer {
  /** `http://host:port`. */
  readonly url: string;
  close(): Promise<void>;
}

function reply(res: ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store' });
  res.end(res.req.method === 'HEAD' ? undefined : body);
}

function probe(res: ServerResponse, v: ProbeVerdict, ok: string, failing: string): void {
  const a = probeAnswer(v, { ok, failing });
  reply(res, a.status, 'application/json', `${JSON.stringify(a.body)}\n`);
}

/** Starts the probes' server; resolves once it listens. */
export async function startHealthServer(o: HealthServerOptions): Promise<HealthServer> {
  const stallMs = o.stallMs ?? 600_000;
  const parts = { ...o, redisTimeoutMs: o.redisTimeoutMs ?? 2_000 };
  const metrics = workerProcessMetrics(o.names.queue, () => o.worker.health());
  const route = async (req: IncomingMessage, res: ServerResponse) => {
    if (req.method !== 'GET' && req.method !== 'HEAD')
      return reply(res, 405, 'text/plain', 'GET or HEAD only\n');
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/healthz')
      return probe(res, liveness(o.worker.health(), stallMs), 'ok', 'failing');
    if (path === '/readyz')
      return probe(res, await readiness(o.worker.health(), parts), 'ready', 'not ready');
    if (path === '/metrics') return reply(res, 200, metrics.contentType, await metrics.metrics());
    reply(res, 404, 'text/plain', 'not found: /healthz, /readyz, /metrics\n');
  };
  const server = createServer((req, res) => {
    route(req, res).catch((err: Error) => reply(res, 500, 'text/plain', `${err.message}\n`));
  });
  // Probes come every few seconds: an idle connection need not stay open.
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, o.host ?? '127.0.0.1', () => resolve());
  });
  const { address, port } = server.address() as AddressInfo;
  const host = address.includes(':') ? `[${address}]` : address;
  return {
    url: `http://${host}:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
