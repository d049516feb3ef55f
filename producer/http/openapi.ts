/** The HTTP enqueue API, described by hand (OpenAPI 3.1). Served at `GET /openapi.json`. */
import { MAX_PRIORITY } from '../../shared/priority.ts';

const error = (codes: string[], description: string) => ({
  description,
  content: {
    'application/json': {
      schema: { $ref: '#/components/schemas/Error' },
      example: { error: { code: codes[0], message: '…' }, request_id: 'req_llmq_…' },
    },
  },
  'x-error-codes': codes,
});

const jobId = {
  name: 'id',
  in: 'path',
  required: true,
  schema: { type: 'string', pattern: '^[A-Za-z0-9_.-]{1,128}$' },
};

export const OPENAPI = {
  openapi: '3.1.0',
  info: {
    title: 'llmq enqueue API',
    version: '1',
    description:
      'Enqueue Anthropic Messages requests into an llmq queue and collect their results. Every call but ' +
      '/openapi.json needs an API key, as `x-api-key: <key>` or `Authorization: Bearer <key>`; the key decides the tenant. Errors are ' +
      '`{ "error": { "code", "message", "field"? }, "request_id" }` with stable codes; `request_id` is also the ' +
      "answer's `request-id` header, and a 5xx is logged under it.",
  },
  // Either scheme: OpenAPI lists alternatives as separate requirement objects.
  security: [{ bearer: [] }, { apiKey: [] }],
  paths: {
    '/v1/jobs': {
      post: {
        summary: 'Enqueue one Messages request',
        requestBody: {
          required: true,
          content: { 'application/json': { schema: { $ref: '#/components/schemas/CreateJob' } } },
        },
        responses: {
          '202': {
            description:
              "Accepted. With an idempotency_key already used by this tenant, the first job's id comes back (created: false) and no job is added.",
            headers: { Location: { schema: { type: 'string' } } },
            content: {
              'application/json': {
                schema: {
                  type: 'object',
                  required: ['id', 'created'],
                  properties: { id: { type: 'string' }, created: { type: 'boolean' } },
                },
              },
            },
          },
          '400': error(
            ['invalid_json', 'invalid_request'],
            'Not JSON, or a field is wrong (`field` names it, e.g. `request.max_tokens`).',
          ),
          '401': error(
            ['unauthorized', 'conflicting_credentials'],
            'No API key, an unknown one, or two different ones (x-api-key and Authorization).',
          ),
          '402': error(
            ['budget_exhausted'],
            'A money budget of the tenant (or the global one) is spent (policy refuse; the message names it and when it resets), or the request could never fit it.',
          ),
          '403': error(
            ['priority_not_allowed'],
            "The priority is more urgent than the API key's max-priority allows.",
          ),
          '409': error(
            ['idempotency_conflict'],
            'The idempotency_key was used for another request (by its digest); nothing was queued.',
          ),
          '413': error(['body_too_large'], 'The body is larger than the server accepts.'),
          '415': error(['unsupported_media_type'], 'The body is not application/json.'),
          '422': error(
            ['cost_exceeds_limit'],
            'The request could never fit a rate limit (lower max_tokens or shorten the input).',
          ),
          '429': {
            ...error(
              ['queue_full', 'too_many_auth_failures'],
              "The queue, or this tenant's share of it, is at its depth bound; or this address " +
                'failed to authenticate too often and is refused for a while.',
            ),
            headers: {
              'Retry-After': {
                description: 'Seconds to wait before trying again.',
                schema: { type: 'integer' },
              },
            },
          },
          '503': error(
            ['redis_unavailable', 'redis_out_of_memory'],
            "The queue's Redis did not answer, or it is out of memory (nothing was written).",
          ),
        },
      },
    },
    '/v1/jobs/{id}': {
      get: {
        summary: "A job's state, and its result or error once finished",
        parameters: [jobId],
        responses: {
          '200': {
            description: 'The job.',
            content: { 'application/json': { schema: { $ref: '#/components/schemas/Job' } } },
          },
          '401': error(
            ['unauthorized', 'conflicting_credentials'],
            'No API key, an unknown one, or two different ones (x-api-key and Authorization).',
          ),
          '404': error(
            ['job_not_found'],
            "No such job for this API key (another tenant's jobs are not found either).",
          ),
          '503': error(
            ['redis_unavailable', 'redis_out_of_memory'],
            "The queue's Redis did not answer, or it is out of memory (nothing was written).",
          ),
        },
      },
      delete: {
        summary: 'Cancel a job that has not started',
        parameters: [jobId],
        responses: {
          '200': {
            description: 'Cancelled: removed from the queue.',
            content: {
              'application/json': {
                schema: {
                  type: 'object',
                  properties: { id: { type: 'string' }, state: { const: 'cancelled' } },
                },
              },
            },
          },
          '401': error(
            ['unauthorized', 'conflicting_credentials'],
            'No API key, an unknown one, or two different ones (x-api-key and Authorization).',
          ),
          '404': error(['job_not_found'], 'No such job for this API key.'),
          '409': error(['job_not_cancellable'], 'The job is active or finished.'),
          '503': error(
            ['redis_unavailable', 'redis_out_of_memory'],
            "The queue's Redis did not answer, or it is out of memory (nothing was written).",
          ),
        },
      },
    },
    '/v1/jobs/{id}/wait': {
      get: {
        summary: 'Long-poll until the job finishes',
        parameters: [
          jobId,
          {
            name: 'timeout',
            in: 'query',
            required: false,
            description:
              "Seconds to wait at most (default 30, at most the server's limit, 60 by default).",
            schema: { type: 'number', minimum: 0 },
          },
        ],
        responses: {
          '200': {
            description: 'Finished: state is completed (with result) or failed (with error).',
            content: { 'application/json': { schema: { $ref: '#/components/schemas/Job' } } },
          },
          '202': {
            description: 'Not finished within the timeout: ask again.',
            content: { 'application/json': { schema: { $ref: '#/components/schemas/Job' } } },
          },
          '400': error(
            ['invalid_request'],
            'The timeout is not a number of seconds within the limit.',
          ),
          '401': error(
            ['unauthorized', 'conflicting_credentials'],
            'No API key, an unknown one, or two different ones (x-api-key and Authorization).',
          ),
          '404': error(['job_not_found'], 'No such job for this API key.'),
          '503': error(
            ['redis_unavailable', 'redis_out_of_memory'],
            "The queue's Redis did not answer, or it is out of memory (nothing was written).",
          ),
        },
      },
    },
    '/openapi.json': {
      get: {
        summary: 'This document',
        security: [],
        responses: { '200': { description: 'OpenAPI 3.1' } },
      },
    },
  },
  components: {
    securitySchemes: {
      bearer: { type: 'http', scheme: 'bearer', description: 'An API key mapped to a tenant.' },
      apiKey: {
        type: 'apiKey',
        in: 'header',
        name: 'x-api-key',
        description: 'The same key, as the Anthropic SDK sends it.',
      },
    },
    schemas: {
      CreateJob: {
        type: 'object',
        required: ['request'],
        additionalProperties: false,
        properties: {
          request: {
            type: 'object',
            description:
              'An Anthropic Messages request (model, max_tokens, messages, …); unknown fields pass through.',
            required: ['model', 'max_tokens', 'messages'],
          },
          priority: {
            description: `A lane (interactive, default, batch) or a whole number from 1 (most urgent) to ${MAX_PRIORITY}, as a number or in digits.`,
            oneOf: [
              { type: 'string', enum: ['interactive', 'default', 'batch'] },
              { type: 'string', pattern: '^[0-9]{1,8}$' },
              { type: 'integer', minimum: 1, maximum: MAX_PRIORITY },
            ],
          },
          tenant: { description: 'Ignored: the API key decides the tenant.' },
          idempotency_key: {
            type: 'string',
            minLength: 1,
            maxLength: 512,
            description:
              'The same key (per tenant) never makes a second job while the first is kept (7 days after it finishes).',
          },
          stream: { type: 'boolean', description: 'Call the provider with streaming.' },
          meta: {
            type: 'object',
            additionalProperties: { type: 'string' },
            description: 'Labels kept with the job.',
          },
          via: {
            type: 'string',
            enum: ['messages', 'batches', 'auto'],
            default: 'messages',
            description:
              'messages: a worker calls the provider now. batches: through Message Batches, at half the price and outside the per-minute limits, done within 24 h (a batch submitter must run; no streaming). auto: batches when the deadline leaves an hour or more, else messages.',
          },
          deadline: {
            type: 'string',
            examples: ['6h', '2026-12-01T18:00:00Z'],
            description:
              'When the job must be done: a duration from now (90m, 6h, 2d) or an ISO 8601 date-time. Via batches, retries past it go through messages.',
          },
          deployment: {
            type: 'string',
            examples: ['eu'],
            description:
              "The deployment of the pool the job must go to (docs/deployments.md); one the server's config does not list is refused. Default: the first that serves its model and has room.",
          },
          retry_for: {
            type: 'string',
            examples: ['30m', '2h', '0'],
            description:
              "How long transient provider failures (529, 5xx, timeouts, dropped connections) are retried, from the first: a duration (90s, 30m, 2h; at most 7d). They spend no attempt; 0 makes them spend attempts instead. Default: the worker's (10m).",
          },
        },
      },
      Job: {
        type: 'object',
        required: ['id', 'state'],
        properties: {
          id: { type: 'string' },
          state: { type: 'string', enum: ['waiting', 'delayed', 'active', 'completed', 'failed'] },
          priority: { type: 'integer' },
          enqueued_at: { type: 'string', format: 'date-time' },
          via: { type: 'string', enum: ['messages', 'batches'] },
          meta: { type: 'object', additionalProperties: { type: 'string' } },
          result: {
            type: 'object',
            description:
              'When completed: the stored Message (content, usage, …), latencyMs, requestId, attempts, completedAt.',
          },
          error: {
            type: 'object',
            description: 'When failed (dead-lettered): why.',
            properties: {
              code: { const: 'job_failed' },
              message: { type: 'string' },
              error_class: { type: 'string' },
              status: { type: 'integer' },
            },
          },
        },
      },
      Error: {
        type: 'object',
        required: ['error', 'request_id'],
        properties: {
          request_id: {
            type: 'string',
            description: "The answer's request-id: a 5xx is logged under it.",
          },
          error: {
            type: 'object',
            required: ['code', 'message'],
            properties: {
              code: {
                type: 'string',
                enum: [
                  'invalid_json',
                  'invalid_request',
                  'unsupported_media_type',
                  'body_too_large',
                  'headers_too_large',
                  'request_timeout',
                  'unauthorized',
                  'conflicting_credentials',
                  'priority_not_allowed',
                  'idempotency_conflict',
                  'too_many_auth_failures',
                  'not_found',
                  'job_not_found',
                  'job_not_cancellable',
                  'queue_full',
                  'cost_exceeds_limit',
                  'budget_exhausted',
                  'redis_unavailable',
                  'redis_out_of_memory',
                  'internal_error',
                ],
              },
              message: { type: 'string' },
              field: {
                type: 'string',
                description: 'The offending field, dotted (request.messages.0.role).',
              },
            },
          },
        },
      },
    },
  },
} as const;
