/**
 * The dashboard's door, run on every request before any route: security headers, the throttle
 * of failed logins, the credentials (see `auth.ts`), the session cookie handed to browsers, and
 * the write rules (see `write-guard.ts`, and read-only).
 */

import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { AuthThrottle } from '../shared/auth-throttle.ts';
import { closeAfterAnswer } from '../shared/http-limits.ts';
import type { AccessGuard } from './auth.ts';
import { PROBE_PATHS } from './probe-routes.ts';
import { writeRefusal } from './write-guard.ts';

/**
 * Bull Board's pages: its scripts are files served from here (no inline script runs), its
 * markup has inline styles. The limiter page sets a stricter one with a nonce.
 */
const BOARD_CSP =
  "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
  "font-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; " +
  "frame-ancestors 'none'";

const wantsHtml = (req: FastifyRequest) => (req.headers.accept ?? '').includes('text/html');

function unauthorized(req: FastifyRequest, reply: FastifyReply, guard: AccessGuard) {
  closeAfterAnswer(req, reply);
  reply.code(401).header('www-authenticate', guard.challenge).header('cache-control', 'no-store');
  if (wantsHtml(req)) {
    const how = guard.acceptsQueryToken
      ? 'Open the URL that <code>llmq dashboard</code> printed (it carries <code>?token=</code>), or send <code>Authorization: Bearer &lt;token&gt;</code>.'
      : 'Sign in with the user and password set in <code>LLMQ_DASHBOARD_USER</code> and <code>LLMQ_DASHBOARD_PASSWORD</code>.';
    return reply
      .type('text/html; charset=utf-8')
      .send(
        `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>llmq dashboard: sign in</title></head>` +
          `<body style="font:15px system-ui,sans-serif;margin:3rem"><h1 style="font-size:1.2rem">401: this dashboard needs credentials</h1><p>${how}</p></body></html>`,
      );
  }
  return reply.send({
    error: {
      code: 'UNAUTHORIZED',
      message: 'credentials required: a bearer token, Basic auth or the session cookie',
    },
  });
}

function refuse(
  req: FastifyRequest,
  reply: FastifyReply,
  status: number,
  code: string,
  message: string,
) {
  closeAfterAnswer(req, reply);
  return reply.code(status).header('cache-control', 'no-store').send({ error: { code, message } });
}

/** Installs the door on `app`. */
export function guardRequests(
  app: FastifyInstance,
  o: { readonly guard: AccessGuard; readonly throttle: AuthThrottle; readonly readOnly: boolean },
): void {
  const { guard, throttle } = o;
  app.addHook('onRequest', async (req, reply) => {
    reply
      .header('content-security-policy', BOARD_CSP)
      .header('x-content-type-options', 'nosniff')
      .header('referrer-policy', 'no-referrer')
      .header('x-frame-options', 'DENY');
    const url = new URL(req.url, 'http://dashboard');
    // Probes carry no credentials (a kubelet has none); they answer nothing but up or down.
    if (PROBE_PATHS.has(url.pathname) && (req.method === 'GET' || req.method === 'HEAD')) return;
    const localPort = req.socket.localPort;
    const refused = throttle.check(req.ip);
    if (!refused.ok) {
      const seconds = Math.max(1, Math.ceil(refused.retryAfterMs / 1000));
      reply.header('retry-after', String(seconds));
      return refuse(
        req,
        reply,
        429,
        'TOO_MANY_AUTH_FAILURES',
        `too many failed logins from this address: try again in ${seconds} s`,
      );
    }
    const queryToken = url.searchParams.get('token');
    const access = guard.check(req.headers, queryToken, localPort);
    if (!access.ok) {
      // A wrong password or token is a guess; no credentials (or a stale cookie) is not.
      if (req.headers.authorization !== undefined || queryToken !== null) throttle.failed(req.ip);
      return unauthorized(req, reply, guard);
    }
    const session = guard.hasSession(req.headers, localPort);
    // A browser signed in with Basic auth gets the session cookie too: its writes need it.
    if (access.via === 'query' || (access.via === 'basic' && !session)) {
      reply.header('set-cookie', guard.sessionCookie(localPort));
    }
    if (access.via === 'query' && req.method === 'GET' && wantsHtml(req)) {
      // Drop the token from the address bar and the history; the cookie carries on.
      url.searchParams.delete('token');
      return (
        reply
          .code(303)
          // One leading slash: `//host/…` would send the browser to another site.
          .header('location', `/${url.pathname.replace(/^\/+/, '')}${url.search}`)
          .header('cache-control', 'no-store')
          .send()
      );
    }
    const why = writeRefusal(req, { via: access.via, session });
    if (why) return refuse(req, reply, 403, 'WRITE_REFUSED', why);
    if (o.readOnly && req.method !== 'GET' && req.method !== 'HEAD') {
      return refuse(req, reply, 403, 'READ_ONLY', 'the dashboard is read-only (--read-only)');
    }
  });
}
