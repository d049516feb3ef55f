import type { IncomingMessage, Server } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify';

/**
 * The limits a server open to a network needs, so no client can hold its sockets.
 * @inline
 */
export interface ServerLimits {
  /** A request's headers must arrive within this. @default 10_000 */
  readonly headersTimeoutMs?: number;
  /** A whole request, body included, must arrive within this (32 MB at ~300 KB/s). @default 120_000 */
  readonly requestTimeoutMs?: number;
  /**
   * An idle keep-alive connection is closed after this (behind a reverse proxy that keeps
   * connections to llmq open, make it longer than the proxy's idle timeout). @default 5_000
   */
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

/**
 * Caps the connections of a server, and closes a connection that sends nothing within the
 * header timeout (Node's timeouts start with a request's first byte: a silent socket would stay
 * forever and count against the cap).
 */
export function capConnections(server: Server, limits: ServerLimits = {}): void {
  server.maxConnections = limits.maxConnections ?? 4_096;
  const silentMs = limits.headersTimeoutMs ?? 10_000;
  server.on('connection', (socket: Socket) => {
    // Node's own handler destroys a socket whose timeout fires with no request on it.
    socket.setTimeout(silentMs);
  });
  // Once a request came, its answer may take long (a long poll, a call): Node's request and
  // keep-alive timeouts take over.
  server.on('request', (req: IncomingMessage) => req.socket.setTimeout(0));
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
