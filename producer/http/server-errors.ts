/**
 * Every answer of `llmq serve` carries a `request-id` (the provider's own on a relayed answer),
 * and every 5xx it gives is logged once, by that id, with the error behind it when there was
 * one: a user quoting the id from an error body finds the line.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { newRequestId } from './anthropic-errors.ts';

/**
 * Where the lines go: a logger's `error` (or `warn`, when it has no `error`).
 * @inline
 */
export interface ServerErrorSink {
  /** A warning line, with its fields. */
  warn(message: string, fields?: Record<string, unknown>): void;
  /** An error line (a 5xx), with its fields. */
  error?(message: string, fields?: Record<string, unknown>): void;
}

const causes = new WeakMap<FastifyRequest, unknown>();

/** Notes the error behind a 5xx answer to `req`, for its log line. */
export function noteCause(req: FastifyRequest, err: unknown): void {
  causes.set(req, err);
}

/** The answer's `request-id`, set first thing for every request. */
export function requestIdOf(reply: FastifyReply): string {
  return String(reply.getHeader('request-id') ?? '');
}

/** Gives every request its id, and logs each 5xx answer once (never a header or a body). */
export function trackServerErrors(app: FastifyInstance, sink: ServerErrorSink | undefined): void {
  app.addHook('onRequest', async (_req, reply) => {
    reply.header('request-id', newRequestId());
  });
  app.addHook('onResponse', async (req, reply) => {
    const route = req.routeOptions.url ?? req.url.split('?')[0];
    // A 503 from /readyz is the state a probe reads every few seconds, not an error.
    if (reply.statusCode < 500 || !sink || route === '/readyz') return;
    const cause = causes.get(req);
    const fields = {
      request_id: requestIdOf(reply),
      method: req.method,
      route,
      status: reply.statusCode,
      ...(cause !== undefined ? { error: describe(cause) } : {}),
    };
    (sink.error ?? sink.warn).call(sink, `answered ${reply.statusCode}`, fields);
  });
}

/** An error's name and message, cut short (no stack: one line per answer). */
function describe(err: unknown): string {
  const text = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  return text.length > 300 ? `${text.slice(0, 300)}…` : text;
}
