/**
 * A `POST /v1/messages` as the gateway reads it before queueing: the body checked as the API
 * checks its top level, and the headers turned into enqueue options.
 */
import type { FastifyRequest } from 'fastify';
import { issueOf, resolvePriority } from '../../shared/priority.ts';
import { keyFromHeader } from '../idempotency.ts';
import type { EnqueueOptions } from '../producer-options.ts';
import { type ApiErrorAnswer, apiError } from './anthropic-errors.ts';

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

/** A request header as one string (repeated ones joined). */
export function header(req: FastifyRequest, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v.join(',') : v;
}

/**
 * The API's 400 for a request without `anthropic-version` (every request to the API must say
 * which version it speaks; the SDKs always do); undefined when it has one.
 */
export function versionMissing(req: FastifyRequest): ApiErrorAnswer | undefined {
  const version = header(req, 'anthropic-version');
  if (version !== undefined && version.trim() !== '') return undefined;
  return apiError('invalid_request_error', 'anthropic-version: header is required');
}

/** What a call asks: the request, whether it streams, and how to enqueue it. */
export interface GatewayCall {
  readonly body: object;
  readonly stream: boolean;
  readonly options: EnqueueOptions;
}

/**
 * The call of a request by `who` (its tenant and default priority), or the API's 400 for a body
 * that is not an object, a field the API does not know, or a bad `llmq-priority`.
 */
export function readCall(
  req: FastifyRequest,
  who: {
    readonly tenant: string;
    readonly priority?: string | number | undefined;
    readonly maxPriority?: number | undefined;
  },
): GatewayCall | ApiErrorAnswer {
  const body = req.body;
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    return apiError('invalid_request_error', 'the body must be a JSON object');
  }
  const unknown = Object.keys(body).find((k) => !KNOWN_FIELDS.has(k));
  if (unknown !== undefined) {
    return apiError('invalid_request_error', `${unknown}: Extra inputs are not permitted`);
  }
  const priority = header(req, 'llmq-priority') ?? who.priority ?? 'interactive';
  try {
    resolvePriority(priority, 'llmq-priority');
  } catch (err) {
    return apiError('invalid_request_error', `llmq-priority: ${issueOf(err)}`);
  }
  const providerHeaders: Record<string, string> = {};
  for (const name of ['anthropic-version', 'anthropic-beta']) {
    const v = header(req, name);
    if (v !== undefined) providerHeaders[name] = v;
  }
  const stream = (body as { stream?: unknown }).stream === true;
  let idempotencyKey = header(req, 'idempotency-key');
  try {
    if (idempotencyKey !== undefined) idempotencyKey = keyFromHeader(idempotencyKey);
  } catch (err) {
    return apiError('invalid_request_error', `idempotency-key: ${issueOf(err)}`);
  }
  return {
    body,
    stream,
    options: {
      tenant: who.tenant,
      priority,
      ...(who.maxPriority !== undefined ? { maxPriority: who.maxPriority } : {}),
      relayEvents: stream,
      providerHeaders,
      ...(idempotencyKey !== undefined ? { idempotencyKey } : {}),
    },
  };
}
