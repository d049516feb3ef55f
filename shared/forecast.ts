import { deploymentScopeAmong } from './deployment-scope.ts';
import { type JobTicket, readTicket } from './job-ticket.ts';
import { bullPrefix, type QueueNames } from './keys.ts';
import {
  type Dimension,
  type DimensionUse,
  GLOBAL_SCOPE,
  type LimiterSnapshot,
  type ScopeSnapshot,
} from './limiter/types.ts';
import { PDF_PAGE_TOKENS } from './media-estimate.ts';
import { isModelScope } from './models.ts';
import { PRIORITY_LANES } from './priority.ts';
import { firstJobs } from './queue-sets.ts';
import type { RedisClient } from './redis.ts';

/** The waiting jobs of one priority, summed. */
export interface BacklogClass {
  readonly priority: number;
  readonly jobs: number;
  readonly inputTokens: number;
  readonly outputTokens: number;
}

/** When one priority class (with every more urgent one before it) will have started. */
export interface ClassForecast extends BacklogClass {
  /** The lane's name when the priority is one (`interactive`, `default`, `batch`). */
  readonly lane: string | null;
  /** From now until the last job of this class is admitted, at the current limits. */
  readonly drainMs: number;
  /** The dimension that takes longest; null when no limit holds the class back. */
  readonly binding: Dimension | null;
}

export interface Forecast {
  readonly windowMs: number;
  /** Jobs read (the backlog is sampled past `maxJobs`; the sums are scaled up to all). */
  readonly sampled: number;
  readonly classes: readonly ClassForecast[];
  /** The whole backlog: the last class's figures. */
  readonly drainMs: number;
  readonly binding: Dimension | null;
}

const DIMS: readonly Dimension[] = ['requests', 'inputTokens', 'outputTokens', 'tokens'];

const laneOf = (p: number): string | null =>
  Object.entries(PRIORITY_LANES).find(([, v]) => v === p)?.[0] ?? null;

/** What bounds a dimension for every job: the most a window allows, and the room now. */
interface Bound {
  readonly perWindow: number;
  readonly room: number;
}

const boundOf = (u: DimensionUse): Bound | undefined =>
  u.perWindow === undefined ? undefined : { perWindow: u.perWindow, room: u.room ?? u.perWindow };

/**
 * The bounds every job of the backlog passes, each as the view reads it (the admission's rule):
 * the global scope; the model scope whose window allows least (the jobs' models are not told
 * apart); a pool's deployments together (a job takes one of them), none while one is unbound.
 */
function boundsOf(scopes: readonly ScopeSnapshot[], d: Dimension): Bound[] {
  const out: Bound[] = [];
  const global = scopes.find((s) => s.scope === GLOBAL_SCOPE);
  const g = global && boundOf(global.dimensions[d]);
  if (g) out.push(g);
  const models = scopes.filter((s) => isModelScope(s.scope)).map((s) => boundOf(s.dimensions[d]));
  const model = models.filter((b) => b !== undefined).sort((a, b) => a.perWindow - b.perWindow)[0];
  if (model) out.push(model);
  const pool = scopes
    .filter((s) => deploymentScopeAmong([s.scope]))
    .map((s) => boundOf(s.dimensions[d]));
  if (pool.length > 0 && pool.every((b) => b !== undefined)) {
    const sum = (f: (b: Bound) => number) => pool.reduce((n, b) => n + f(b!), 0);
    out.push({ perWindow: sum((b) => b.perWindow), room: sum((b) => Math.max(0, b.room)) });
  }
  return out;
}

/** How long `need` takes past a bound's room now, a window's worth a cycle. */
const drainOf = (need: number, b: Bound, cycleMs: number): number =>
  need <= Math.max(0, b.room)
    ? 0
    : ((need - Math.max(0, b.room)) / Math.max(1, b.perWindow)) * cycleMs;

/**
 * When the backlog drains at the current limits: per dimension and per bound every job passes
 * ({@link boundsOf}), what the jobs need beyond the room a call has there now, at the most a
 * window allows; the slowest binds. Room and windows are the view's (view-4.lua: headroom, the
 * provider's projection, a covering bucket, each deployment), so the forecast says "now" only
 * when the admission would admit. A spend enters the window when its response begins, so each
 * window's worth comes back one window plus a call (`callMs`, the median provider latency) after
 * the last. Classes drain in priority order, each behind the more urgent ones. Estimates are the
 * jobs' reservations (output at max_tokens): a refund at settle drains faster than forecast; the
 * concurrency cap is not counted.
 */
export function forecastDrain(
  backlog: readonly BacklogClass[],
  snapshot: Pick<LimiterSnapshot, 'windowMs' | 'scopes'>,
  options: { readonly callMs?: number; readonly sampled?: number } = {},
): Forecast {
  const cycleMs = snapshot.windowMs + Math.max(0, options.callMs ?? 0);
  const sampled = options.sampled ?? backlog.reduce((n, c) => n + c.jobs, 0);
  const need = { requests: 0, inputTokens: 0, outputTokens: 0, tokens: 0 };
  const classes: ClassForecast[] = [];
  for (const c of [...backlog].sort((a, b) => a.priority - b.priority)) {
    need.requests += c.jobs;
    need.inputTokens += c.inputTokens;
    need.outputTokens += c.outputTokens;
    need.tokens += c.inputTokens + c.outputTokens;
    let drainMs = 0;
    let binding: Dimension | null = null;
    for (const d of DIMS) {
      for (const b of boundsOf(snapshot.scopes, d)) {
        const ms = drainOf(need[d], b, cycleMs);
        if (ms > drainMs) {
          drainMs = ms;
          binding = d;
        }
      }
    }
    classes.push({ ...c, lane: laneOf(c.priority), drainMs: Math.round(drainMs), binding });
  }
  const last = classes.at(-1);
  return {
    windowMs: snapshot.windowMs,
    sampled,
    classes,
    drainMs: last?.drainMs ?? 0,
    binding: last?.binding ?? null,
  };
}

/**
 * Sums the waiting jobs' reservations per priority (prioritized, wait and delayed sets), read
 * from their tickets (a few bytes each, not their requests): their input as the producer
 * reserved it (PDF pages at what it learned a page costs), their max_tokens. One read of the
 * ids, one pipeline of the tickets (and the data of a job of the first format, which has none).
 * Past `maxJobs` the first ones stand for all, scaled by the count. Reads only.
 */
export async function readBacklog(
  redis: RedisClient,
  names: QueueNames,
  maxJobs = 5_000,
): Promise<{ classes: BacklogClass[]; sampled: number }> {
  const base = `${bullPrefix(names)}:${names.queue}:`;
  const { ids: first, total } = await firstJobs(
    redis,
    names,
    ['prioritized', 'wait', 'delayed'],
    maxJobs,
  );
  const { prioritized = [], wait = [], delayed = [] } = first;
  const ids = [...prioritized, ...wait, ...delayed].slice(0, maxJobs);
  const tickets = await readTickets(redis, base, ids);
  const sums = new Map<number, { jobs: number; inputTokens: number; outputTokens: number }>();
  for (const { ticket, priority } of tickets) {
    const s = sums.get(priority) ?? { jobs: 0, inputTokens: 0, outputTokens: 0 };
    s.jobs++;
    s.inputTokens += reservedInput(ticket);
    s.outputTokens += ticket.c[2];
    sums.set(priority, s);
  }
  const sampled = tickets.length;
  const scale = sampled > 0 && total > sampled ? total / sampled : 1;
  const classes = [...sums].map(([priority, s]) => ({
    priority,
    jobs: Math.round(s.jobs * scale),
    inputTokens: Math.round(s.inputTokens * scale),
    outputTokens: Math.round(s.outputTokens * scale),
  }));
  return { classes, sampled };
}

/** The jobs' tickets (unreadable ones left out): their options, a legacy job's data. */
async function readTickets(
  redis: RedisClient,
  base: string,
  ids: readonly string[],
): Promise<{ ticket: JobTicket; priority: number }[]> {
  if (ids.length === 0) return [];
  const opts = await redis.pipeline(ids.map((id) => ['hget', `${base}${id}`, 'opts'])).exec();
  const legacy = ids.filter((_, i) => !String(opts?.[i]?.[1] ?? '').includes('"llmq"'));
  const datas =
    legacy.length > 0
      ? await redis.pipeline(legacy.map((id) => ['hget', `${base}${id}`, 'data'])).exec()
      : [];
  const dataOf = new Map(legacy.map((id, i) => [id, datas?.[i]?.[1]]));
  const out: { ticket: JobTicket; priority: number }[] = [];
  ids.forEach((id, i) => {
    const o = opts?.[i]?.[1];
    if (typeof o !== 'string') return;
    const data = dataOf.get(id);
    const r = readTicket(o, typeof data === 'string' ? data : undefined);
    if (r.ok) out.push({ ticket: r.ticket, priority: r.priority });
  });
  return out;
}

/** A ticket's input as reserved: its PDF pages at the producer's figure, a count as is. */
function reservedInput(t: JobTicket): number {
  const input = t.c[1];
  if (!t.p) return input;
  return Math.max(1, input - t.p[0] * (PDF_PAGE_TOKENS - t.p[1]));
}

/** `12 s`, `4 min 10 s`, `2 h 5 min`. */
export function formatDuration(ms: number): string {
  const s = Math.round(ms / 1_000);
  if (s < 60) return `${s} s`;
  if (s < 3_600) return `${Math.floor(s / 60)} min${s % 60 ? ` ${s % 60} s` : ''}`;
  const m = Math.round(s / 60);
  return `${Math.floor(m / 60)} h${m % 60 ? ` ${m % 60} min` : ''}`;
}
