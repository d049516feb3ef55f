/**
 * The job API's routes (`/v1/jobs`: create, read, wait for, cancel) and `/openapi.json`,
 * framework-free: the body as the API spells it, turned into the producer's options.
 */
import { z } from 'zod';
import { parseDeadline, resolveVia } from '../../shared/batch-via.ts';
import { durationMs } from '../../shared/duration.ts';
import { LlmqError, RequestValidationError } from '../../shared/errors.ts';
import { MAX_RETRY_FOR_MS } from '../../shared/job.ts';
import { toFieldIssues } from '../../shared/request.ts';
import type { JobStatus } from '../job-status.ts';
import type { EnqueuedJob, EnqueueOptions, Producer } from '../producer.ts';
import {
  type Authenticate,
  caught,
  errorResponse,
  type Handler,
  type HandlerRequest,
  type HandlerResponse,
  type Route,
  withAuth,
} from './handlers.ts';
import { OPENAPI } from './openapi.ts';

const CreateJobBody = z.strictObject({
  request: z.unknown(),
  priority: z.union([z.string(), z.number()]).optional(),
  /** Ignored: the API key decides the tenant. */
  tenant: z.unknown().optional(),
  idempotency_key: z.string().optional(),
  stream: z.boolean().optional(),
  meta: z.record(z.string(), z.string()).optional(),
  via: z.enum(['messages', 'batches', 'auto']).optional(),
  /** The deployment of the pool it is pinned to. */
  deployment: z.string().optional(),
  /** A duration from now (`90m`, `6h`, `2d`) or an ISO 8601 date-time. */
  deadline: z
    .string()
    .refine(
      (d) => deadlineAt(d) !== undefined,
      'must be a duration such as 90m, 6h or 2d, or an ISO 8601 date-time in the future',
    )
    .optional(),
  /** A duration (`30m`): how long transient failures are retried. */
  retry_for: z
    .string()
    .refine(
      (d) => retryForMsOf(d) !== undefined,
      'must be a duration such as 90s, 30m or 2h (at most 7d; 0 makes transient failures spend attempts)',
    )
    .optional(),
});

/** A `retry_for` of the body in ms, or undefined when it is not one. */
function retryForMsOf(text: string): number | undefined {
  const ms = durationMs(text);
  return ms !== undefined && ms <= MAX_RETRY_FOR_MS ? ms : undefined;
}

/** When a `deadline` of the body ends (ms since the epoch), or undefined when it is not one. */
function deadlineAt(text: string): number | undefined {
  if (/^\d/.test(text) && /[smhd]\s*$/.test(text)) {
    try {
      return Date.now() + parseDeadline(text);
    } catch {
      return undefined;
    }
  }
  const at = /^\d{4}-\d{2}-\d{2}T/.test(text) ? Date.parse(text) : Number.NaN;
  return at > Date.now() ? at : undefined;
}

/** Option names of the producer as the HTTP body spells them. */
const BODY_FIELD: Record<string, string> = {
  idempotencyKey: 'idempotency_key',
  priority: 'priority',
  meta: 'meta',
  tenant: 'tenant',
  deadlineAt: 'deadline',
  deployment: 'deployment',
  via: 'via',
  retryForMs: 'retry_for',
};

function bodyIssues(error: z.ZodError, body: unknown): RequestValidationError {
  const issues = error.issues.flatMap((issue) =>
    issue.code === 'unrecognized_keys'
      ? issue.keys.map((k) => ({
          field: k,
          message:
            'is not a field of this body (request, priority, idempotency_key, stream, meta, via, deployment, deadline, retry_for)',
        }))
      : toFieldIssues(new z.ZodError([issue]), body),
  );
  return new RequestValidationError(issues, 'invalid body');
}

const JOB_ID = /^[A-Za-z0-9_.-]{1,128}$/;

export interface ApiHandlersOptions {
  readonly producer: Producer;
  /** Who may call (see {@link apiKeyAuth}). */
  readonly authenticate: Authenticate;
  /** The longest `/wait` long-poll, in ms. @default 60_000 */
  readonly maxWaitMs?: number;
}

/** Every route of the HTTP API, framework-free. */
export function createRoutes(options: ApiHandlersOptions): Route[] {
  const { authenticate } = options;
  const jobs = new JobHandlers(options.producer, options.maxWaitMs ?? 60_000);
  const guarded = (h: Handler) => caught(withAuth(h));
  const openapi: Handler = async () => ({ status: 200, body: OPENAPI });
  return [
    { method: 'POST', path: '/v1/jobs', handler: guarded((r) => jobs.create(r)), authenticate },
    { method: 'GET', path: '/v1/jobs/:id', handler: guarded((r) => jobs.get(r)), authenticate },
    {
      method: 'GET',
      path: '/v1/jobs/:id/wait',
      handler: guarded((r) => jobs.wait(r)),
      authenticate,
    },
    {
      method: 'DELETE',
      path: '/v1/jobs/:id',
      handler: guarded((r) => jobs.cancel(r)),
      authenticate,
    },
    { method: 'GET', path: '/openapi.json', handler: caught(openapi) },
  ];
}

/** The producer's options for a `POST /v1/jobs` body, from the caller's tenant and headers. */
function enqueueOptionsOf(b: z.infer<typeof CreateJobBody>, req: HandlerRequest): EnqueueOptions {
  const at = b.deadline !== undefined ? deadlineAt(b.deadline) : undefined;
  const via = resolveVia(b.via ?? 'messages', at !== undefined ? at - Date.now() : undefined);
  return {
    tenant: req.auth!.tenant,
    ...(b.priority !== undefined ? { priority: b.priority } : {}),
    ...(req.auth!.maxPriority !== undefined ? { maxPriority: req.auth!.maxPriority } : {}),
    ...(b.idempotency_key !== undefined ? { idempotencyKey: b.idempotency_key } : {}),
    ...(b.stream !== undefined ? { stream: b.stream } : {}),
    ...(b.meta !== undefined ? { meta: b.meta } : {}),
    via,
    ...(b.deployment !== undefined ? { deployment: b.deployment } : {}),
    ...(at !== undefined ? { deadlineAt: at } : {}),
    ...(b.retry_for !== undefined ? { retryForMs: retryForMsOf(b.retry_for)! } : {}),
    // The job's trace continues the caller's (W3C Trace Context).
    ...(req.headers['traceparent'] ? { traceparent: req.headers['traceparent'] } : {}),
  };
}

/** The `/v1/jobs` routes: create, read, wait for and cancel a job of the caller's tenant. */
class JobHandlers {
  constructor(
    private readonly producer: Producer,
    private readonly maxWaitMs: number,
  ) {}

  /** The job if it exists and belongs to the caller's tenant; a stranger's job is "not found". */
  private async ownJob(req: HandlerRequest): Promise<JobStatus | HandlerResponse> {
    const id = req.params['id'] ?? '';
    const status = JOB_ID.test(id) ? await this.producer.status(id) : null;
    if (!status || status.data.tenant !== req.auth?.tenant) {
      return errorResponse(
        404,
        'job_not_found',
        `no job ${JSON.stringify(id.slice(0, 128))} for this API key`,
      );
    }
    return status;
  }

  async create(req: HandlerRequest): Promise<HandlerResponse> {
    if (req.body === null || typeof req.body !== 'object' || Array.isArray(req.body)) {
      return errorResponse(
        400,
        'invalid_json',
        'the body must be a JSON object such as {"request": {…}}',
      );
    }
    const parsed = CreateJobBody.safeParse(req.body);
    if (!parsed.success) throw bodyIssues(parsed.error, req.body);
    const b = parsed.data;
    const opts = enqueueOptionsOf(b, req);
    let job: EnqueuedJob;
    try {
      job = await this.producer.enqueueJob(b.request, opts);
    } catch (err) {
      if (err instanceof RequestValidationError) {
        // Fields of the Messages request live under `request.`; options keep their body names.
        throw new RequestValidationError(
          err.issues.map((s) => ({
            field: BODY_FIELD[s.field] ?? `request.${s.field}`.replace(/\.\(body\)$/, ''),
            message: s.message,
          })),
        );
      }
      throw err;
    }
    return {
      status: 202,
      body: { id: job.id, created: job.created },
      headers: { location: `/v1/jobs/${job.id}` },
    };
  }

  async get(req: HandlerRequest): Promise<HandlerResponse> {
    const status = await this.ownJob(req);
    return 'status' in status ? status : { status: 200, body: jobView(status) };
  }

  async wait(req: HandlerRequest): Promise<HandlerResponse> {
    const raw = req.query['timeout'];
    const seconds = raw === undefined ? 30 : Number(raw);
    if (!Number.isFinite(seconds) || seconds < 0 || seconds * 1000 > this.maxWaitMs) {
      return errorResponse(
        400,
        'invalid_request',
        `timeout must be a number of seconds from 0 to ${this.maxWaitMs / 1000} (got ${JSON.stringify(raw)})`,
        {
          field: 'timeout',
        },
      );
    }
    const status = await this.ownJob(req);
    if ('status' in status) return status;
    if (status.state === 'completed' || status.state === 'failed')
      return { status: 200, body: jobView(status) };
    try {
      await this.producer.waitForResult(status.id, {
        timeout: seconds * 1000,
        signal: req.signal,
        ...(status.via ? { via: status.via } : {}),
      });
    } catch (err) {
      // Finished as failed, timed out, removed, or the wait was cut short: answer with the state now.
      if (err instanceof LlmqError && err.code === 'REDIS_UNAVAILABLE') throw err;
    }
    const now = await this.producer.status(status.id);
    if (!now)
      return errorResponse(
        404,
        'job_not_found',
        `job ${status.id} was removed while waiting for it`,
      );
    const done = now.state === 'completed' || now.state === 'failed';
    return { status: done ? 200 : 202, body: jobView(now) };
  }

  async cancel(req: HandlerRequest): Promise<HandlerResponse> {
    const status = await this.ownJob(req);
    if ('status' in status) return status;
    const outcome = await this.producer.cancel(status.id);
    if (outcome === 'cancelled')
      return { status: 200, body: { id: status.id, state: 'cancelled' } };
    if (outcome === 'not_found')
      return errorResponse(404, 'job_not_found', `no job ${status.id} for this API key`);
    return errorResponse(
      409,
      'job_not_cancellable',
      `job ${status.id} is ${outcome}: only a job that has not started can be cancelled`,
    );
  }
}

/** A job as the API shows it: never the request's content, only what the caller needs. */
export function jobView(status: JobStatus): Record<string, unknown> {
  const base = {
    id: status.id,
    state: status.state,
    priority: status.data.priority,
    enqueued_at: new Date(status.data.enqueuedAt).toISOString(),
    via: status.via ?? 'messages',
    ...(status.data.meta ? { meta: status.data.meta } : {}),
  };
  if (status.state === 'completed') return { ...base, result: status.result };
  if (status.state === 'failed') {
    const e = status.error;
    return {
      ...base,
      error: {
        code: 'job_failed',
        message: e.reason,
        ...(e.errorClass ? { error_class: e.errorClass } : {}),
        ...(e.status !== undefined ? { status: e.status } : {}),
      },
    };
  }
  return base;
}
