import type { Server } from 'node:http';
import type { FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify';

/** The limits a server open to a network needs, so no client can hold its sockets. */
export interface ServerLimits {
  /** A request's headers must arrive within this. @default 10_000 */
  readonly headersTimeoutMs?: number;
  /** A whole request, body included, must arrive within this (32 MB at ~300 KB/s). @default 120_000 */
  readonly requestTimeoutMs?: number;
  /** An idle keep-alive connection is closed after this. @default 5_000 */
  readonly keepAliveTimeoutMs?: number;
  /** Connections open at once; more are closed as they come. @default 4_096 */
  readonly maxConnections?: number;
}

/** Fastify's options for {@link ServerLimits} (answers are not bounded: long polls and streams). */
export function serverLimitOptions(limits: ServerLimits = {}): FastifyServerOptions {
  const headersTimeout = limits.headersTimeoutMs ?? 10_000;
  const requestTimeout = Math.max(limits.requestTimeoutMs ?? 120_000, headersTimeout);
  return {
    requestTimeout,
    keepAliveTimeout: limits.keepAliveTimeoutMs ?? 5_000,
    // Node checks the two timeouts above on this interval (30 s by default).
    http: { headersTimeout, connectionsCheckingInterval: Math.min(1_000, headersTimeout) },
  } as FastifyServerOptions;
}

/** Caps the connections of a started server. */
export function capConnections(server: Server, limits: ServerLimits = {}): void {
  server.maxConnections = limits.maxConnections ?? 4_096;
}

/**
 * For an answer that refuses a request before its body was read (no credentials): the
 * connection closes once the answer is sent, so a client that declared a body and trickles it
 * holds no socket (Node would otherwise read the rest of the body to keep the connection).
 */
export function closeAfterAnswer(req: FastifyRequest, reply: FastifyReply): void {
  const hasBody =
    req.headers['transfer-encoding'] !== undefined ||
    Number(req.headers['content-length'] ?? 0) > 0;
  if (!hasBody) return;
  reply.header('connection', 'close');
  reply.raw.once('finish', () => req.raw.socket?.destroy());
}
