import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { closeAfterAnswer } from '../../shared/http-limits.ts';
import { MAX_JSON_DEPTH, shownPath, tooDeepAt } from '../../shared/json-bounds.ts';
import {
  type Authenticate,
  type Caller,
  errorResponse,
  type HandlerRequest,
  type HandlerResponse,
  type Route,
} from './handlers.ts';
import { noteCause, requestIdOf } from './server-errors.ts';

/** The code of the JSON parser's error, for error handlers of other route sets. */
export const INVALID_JSON = 'LLMQ_INVALID_JSON';
/** The code of the parser's error for a body nested too deep; its message names the field. */
export const JSON_TOO_DEEP = 'LLMQ_JSON_TOO_DEEP';

/**
 * Parses a JSON body and bounds its nesting before any handler (or JSON.stringify) recurses
 * into it; the error carries the code a route set's error handler maps.
 */
function parseJsonBody(body: string): unknown {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    throw Object.assign(new Error('the body is not valid JSON'), {
      code: INVALID_JSON,
      statusCode: 400,
    });
  }
  const path = tooDeepAt(value);
  if (path !== undefined) {
    throw Object.assign(
      new Error(
        `${shownPath(path)}: is nested more than ${MAX_JSON_DEPTH} levels deep: flatten it`,
      ),
      { code: JSON_TOO_DEEP, statusCode: 400, field: shownPath(path) },
    );
  }
  return value;
}

/** Sends an answer; an error body carries the request's id, to find its log line by. */
function send(reply: FastifyReply, res: HandlerResponse): FastifyReply {
  const body =
    res.status >= 400 && res.body !== null && typeof res.body === 'object'
      ? { ...res.body, request_id: requestIdOf(reply) }
      : res.body;
  return reply
    .code(res.status)
    .headers({ 'cache-control': 'no-store', ...(res.headers ?? {}) })
    .type('application/json; charset=utf-8')
    .send(JSON.stringify(body));
}

function flat(o: unknown): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries((o ?? {}) as Record<string, unknown>)) {
    out[k] = Array.isArray(v) ? String(v[0]) : v === undefined ? undefined : String(v);
  }
  return out;
}

/**
 * Mounts framework-free routes on a fastify instance: JSON bodies parsed here (bad JSON and
 * oversize bodies answered with the API's error codes), every other framework error mapped too,
 * and the long polls aborted when the client goes away or `shutdown` fires. Nothing is logged.
 * Credentials are checked first, before the body is read: a caller without them learns nothing
 * about a route (its body type, its size) and gets the same 401 on paths that do not exist.
 */
export function mountRoutes(
  app: FastifyInstance,
  routes: readonly Route[],
  options: {
    readonly shutdown?: AbortSignal;
    /** Checks requests that match no route. */
    readonly authenticate?: Authenticate;
  } = {},
): void {
  const tenants = new WeakMap<FastifyRequest, Caller>();
  app.addHook('onRequest', async (req, reply) => {
    const config = req.routeOptions.config as { llmqAuth?: Authenticate } | undefined;
    const check = req.routeOptions.url === undefined ? options.authenticate : config?.llmqAuth;
    if (!check) return;
    const outcome = await check({ headers: flat(req.headers), address: req.ip });
    if ('status' in outcome) {
      closeAfterAnswer(req, reply);
      return send(reply, outcome);
    }
    tenants.set(req, outcome);
  });
  // JSON only: any other body type is answered 415.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => {
    try {
      done(null, parseJsonBody(body as string));
    } catch (err) {
      done(err as Error, undefined);
    }
  });
  app.setErrorHandler((err: Error & { code?: string; statusCode?: number }, req, reply) => {
    const res = frameworkError(err);
    if (res.status >= 500) noteCause(req, err);
    return send(reply, res);
  });
  app.setNotFoundHandler((req, reply) =>
    send(reply, errorResponse(404, 'not_found', `no route ${req.method} ${req.url.split('?')[0]}`)),
  );
  for (const route of routes) {
    app.route({
      method: route.method,
      url: route.path,
      config: { llmqAuth: route.authenticate },
      handler: (req: FastifyRequest, reply: FastifyReply) =>
        handle(route, req, reply, tenants.get(req), options.shutdown),
    });
  }
}

/** A framework error (bad JSON, a body too large or of another type…) as the API's answer. */
function frameworkError(err: Error & { code?: string; statusCode?: number }) {
  switch (err.code) {
    case JSON_TOO_DEEP:
      return errorResponse(400, 'invalid_request', err.message, {
        field: (err as { field?: string }).field,
      });
    case INVALID_JSON:
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return errorResponse(400, 'invalid_json', 'the body is not valid JSON');
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return errorResponse(413, 'body_too_large', 'the body is larger than this server accepts');
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return errorResponse(415, 'unsupported_media_type', 'send the body as application/json');
    default:
      if (err.statusCode !== undefined && err.statusCode >= 400 && err.statusCode < 500)
        return errorResponse(400, 'invalid_request', 'the request could not be read');
      return errorResponse(500, 'internal_error', 'internal error');
  }
}

/** Runs one route's handler; its signal aborts when the client goes away or on shutdown. */
async function handle(
  route: Route,
  req: FastifyRequest,
  reply: FastifyReply,
  auth: Caller | undefined,
  shutdown: AbortSignal | undefined,
) {
  const gone = new AbortController();
  const onClose = () => {
    if (!reply.sent) gone.abort(new Error('client went away'));
  };
  reply.raw.once('close', onClose);
  const request: HandlerRequest = {
    params: flat(req.params),
    query: flat(req.query),
    body: req.body,
    headers: flat(req.headers),
    auth,
    signal: shutdown ? AbortSignal.any([gone.signal, shutdown]) : gone.signal,
  };
  const res = await route.handler(request);
  reply.raw.off('close', onClose);
  if (res.cause !== undefined) noteCause(req, res.cause);
  return send(reply, res);
}
