import { z } from 'zod';
import { ESTIMATE_VERSION } from './estimate.ts';
import type { JobData } from './job.ts';
import { cachePrefixOf } from './prompt-cache.ts';

/**
 * What the gate needs of a job to schedule it, kept in the job's BullMQ options (`opts.llmq`),
 * where a request cannot write: its cost, model, tenant and scopes. The priority is BullMQ's
 * own (`priority` in the job's hash). The gate and its Lua read this, never the request's JSON.
 */
export interface JobTicket {
  /** The job format: {@link JOB_FORMAT}. */
  readonly v: number;
  /** Requests, input tokens (the estimate), max_tokens. */
  readonly c: readonly [number, number, number];
  readonly m: string;
  readonly t?: string | undefined;
  readonly s?: readonly string[] | undefined;
  /** The input was counted by count_tokens: reserved as is. */
  readonly x?: 1 | undefined;
  /** Its cached prefix (prompt caching): key and estimated tokens (see shared/prompt-cache.ts). */
  readonly k?: readonly [string, number] | undefined;
  /** The deployment of the pool it pins (see shared/deployments.ts). */
  readonly d?: string | undefined;
  /** Its PDF pages and the tokens reserved for each (JobData.pdfPages). */
  readonly p?: readonly [number, number] | undefined;
  /** The version of the costing code that costed it (ESTIMATE_VERSION; absent: older builds). */
  readonly e?: number | undefined;
  /** The cost it claimed before a worker's check raised it to what its request implies. */
  readonly w?: readonly [number, number, number] | undefined;
}

/** The job format this build writes and reads; older formats are read too (see readTicket). */
export const JOB_FORMAT = 2;

const count = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);
const name = z.string().min(1).max(256);

const TicketSchema = z.object({
  v: z.number().int().min(1),
  c: z.tuple([count, count, count]),
  m: name,
  t: name.optional(),
  s: z
    .array(z.string().regex(/^[^|,\s]{1,200}$/))
    .max(16)
    .optional(),
  x: z.literal(1).optional(),
  k: z.tuple([z.string().max(64), count]).optional(),
  d: z
    .string()
    .regex(/^[A-Za-z0-9_-]{1,40}$/)
    .optional(),
  p: z.tuple([count, count]).optional(),
  e: z.number().int().min(0).optional(),
  w: z.tuple([count, count, count]).optional(),
});

/** What a worker reads of every job's data before it calls the provider with it. */
const DataSchema = z
  .object({
    v: z.literal(1),
    request: z
      .object({ model: name, max_tokens: count, messages: z.array(z.unknown()).min(1) })
      .loose(),
    cost: z.object({ requests: count, inputTokens: count, outputTokens: count }),
    priority: z.number().int().min(1),
  })
  .loose();

/** A format-1 job (no ticket): the same fields, read from its data. */
const LegacySchema = z.object({
  v: z.literal(1),
  request: z.object({ model: name, max_tokens: count }).loose(),
  cost: z.object({ requests: count, inputTokens: count, outputTokens: count }),
  priority: z.number().int().min(1),
  tenant: name.optional(),
  scopes: z
    .array(z.string().regex(/^[^|,\s]{1,200}$/))
    .max(16)
    .optional(),
  inputCounted: z.literal(true).optional(),
});

/** The ticket of a job's data, as the producer writes it into the job's options. */
export function ticketOf(data: JobData): JobTicket {
  const c = data.cost;
  const prefix = cachePrefixOf(data.request);
  return {
    v: JOB_FORMAT,
    c: [c.requests, c.inputTokens, c.outputTokens],
    m: data.request.model,
    ...(data.tenant !== undefined ? { t: data.tenant } : {}),
    ...(data.scopes?.length ? { s: data.scopes } : {}),
    ...(data.inputCounted ? { x: 1 as const } : {}),
    ...(prefix ? { k: [prefix.key, prefix.tokens] as const } : {}),
    ...(data.deployment !== undefined ? { d: data.deployment } : {}),
    ...(data.pdfPages ? { p: [data.pdfPages.pages, data.pdfPages.perPage] as const } : {}),
    e: ESTIMATE_VERSION,
  };
}

/** A problem with a job's data that makes it no job to run (its ticket aside), or undefined. */
export function jobDataProblem(data: unknown): string | undefined {
  const d = DataSchema.safeParse(data);
  return d.success ? undefined : `its data ${issue(d.error)}`;
}

/** A job's ticket as read: usable, of a newer format (left for a worker that knows it), or bad. */
export type TicketReading =
  | { readonly ok: true; readonly ticket: JobTicket; readonly priority: number }
  | { readonly ok: false; readonly newer: boolean; readonly reason: string };

const bad = (reason: string): TicketReading => ({ ok: false, newer: false, reason });

/**
 * Reads a job's ticket from its options (JSON, as BullMQ stores them), or for a format-1 job from
 * its data (JSON). Never throws: what cannot be read says why.
 */
export function readTicket(optsJson: string, dataJson: string | undefined): TicketReading {
  return ticketOfJob(parse(optsJson), () => (dataJson === undefined ? undefined : parse(dataJson)));
}

/** {@link readTicket} for a job's parsed options and data (`data` is read for a format-1 job). */
export function ticketOfJob(optsValue: unknown, data: () => unknown): TicketReading {
  const opts = optsValue as { llmq?: unknown } | undefined;
  if (opts?.llmq !== undefined) {
    const v = (opts.llmq as { v?: unknown }).v;
    if (typeof v === 'number' && v > JOB_FORMAT)
      return { ok: false, newer: true, reason: `job format ${v}; this worker reads ${JOB_FORMAT}` };
    const t = TicketSchema.safeParse(opts.llmq);
    const priority = (opts as { priority?: unknown }).priority;
    if (!t.success) return bad(`its ticket ${issue(t.error)}`);
    return { ok: true, ticket: t.data, priority: typeof priority === 'number' ? priority : 100 };
  }
  return legacyTicket(data());
}

/** A format-1 job's ticket, from its data. */
function legacyTicket(data: unknown): TicketReading {
  if (data === undefined) return bad('its data is not JSON');
  const v = (data as { v?: unknown }).v;
  if (typeof v === 'number' && v > 1 && Number.isInteger(v))
    return { ok: false, newer: true, reason: `job format ${v}; this worker reads ${JOB_FORMAT}` };
  const d = LegacySchema.safeParse(data);
  if (!d.success) return bad(`its data ${issue(d.error)}`);
  const j = d.data;
  return {
    ok: true,
    priority: j.priority,
    ticket: {
      v: 1,
      c: [j.cost.requests, j.cost.inputTokens, j.cost.outputTokens],
      m: j.request.model,
      t: j.tenant,
      s: j.scopes,
      x: j.inputCounted ? 1 : undefined,
    },
  };
}

function parse(json: string): unknown {
  try {
    return JSON.parse(json);
  } catch {
    return undefined;
  }
}

/** The first problem zod found, as "has no field x" or "field x: …". */
function issue(err: z.ZodError): string {
  const i = err.issues[0];
  const path = i?.path.join('.') || '(top)';
  return `is not an llmq job (${path}: ${i?.message ?? 'invalid'})`;
}
