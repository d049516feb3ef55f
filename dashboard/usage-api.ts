/**
 * The JSON behind the pages: the queue's live view for the limiter page, with the fleet's last
 * 15 minutes of estimate and usage for its chart; for the overview and
 * the tenant and model pages, the usage history of a range
 * (`shared/history-reader.ts`) with the queue's live view (`fleet-reader.ts`): backlog and
 * forecast, limits, spend against budgets, a tenant's jobs. Reads only.
 */

import type { FastifyInstance, FastifyReply } from 'fastify';
import type { SpendLine } from '../shared/budgets.ts';
import {
  FLEET_SERIES,
  HISTORY_RANGES,
  type HistoryRange,
  modelSeries,
  tenantSeries,
} from '../shared/history.ts';
import { historyLabels, readUsageHistory, type UsageHistory } from '../shared/history-reader.ts';
import type { ScopeSnapshot } from '../shared/limiter/types.ts';
import { matchModel } from '../shared/models.ts';
import type { Board } from './board.ts';
import type { FleetReader, QueueView } from './fleet-reader.ts';
import { readTenantJobs } from './tenant-jobs.ts';

export interface PageApiOptions {
  readonly reader: FleetReader;
  readonly board: Board;
  /** The queue pages open on when none is asked for (else the busiest). */
  readonly queue?: string | undefined;
}

type Query = { queue?: string; range?: string; kind?: string; name?: string };

function fail(reply: FastifyReply, status: number, code: string, message: string, extra = {}) {
  return reply.code(status).send({ ...extra, error: { code, message } });
}

/**
 * The queue a page asked for, else the configured one, else the busiest; `missing` when the
 * asked one is not registered.
 */
async function chooseQueue(
  o: Pick<PageApiOptions, 'reader' | 'board' | 'queue'>,
  asked: unknown,
): Promise<{ queues: readonly string[]; queue: string | undefined; missing: boolean }> {
  const queues = await o.board.refresh();
  const want = typeof asked === 'string' && asked !== '' ? asked : undefined;
  if (want !== undefined) return { queues, queue: want, missing: !queues.includes(want) };
  const preferred = o.queue !== undefined && queues.includes(o.queue) ? o.queue : undefined;
  return { queues, queue: preferred ?? (await o.reader.busiest(queues)), missing: false };
}

/** A 404 naming the queue, or undefined when it is there. */
function queueMissing(
  reply: FastifyReply,
  prefix: string,
  c: { queues: readonly string[]; queue?: string; missing: boolean },
) {
  if (!c.missing) return undefined;
  return fail(
    reply,
    404,
    'QUEUE_NOT_FOUND',
    `no queue named ${JSON.stringify(c.queue)} under prefix ${prefix}`,
    { queues: c.queues },
  );
}

function rangeOf(raw: unknown): HistoryRange | undefined {
  const r = raw === undefined || raw === '' ? '15m' : raw;
  return HISTORY_RANGES.find((x) => x === r);
}

const BAD_RANGE = (raw: unknown) =>
  `range must be one of ${HISTORY_RANGES.join(', ')}, got ${JSON.stringify(raw)}`;

/** What every page shows of the queue's state now. */
function current(view: QueueView) {
  return {
    waiting: view.depth.waiting,
    bound: view.depth.bound,
    active: view.jobs['active'] ?? 0,
    deadLetters: view.deadLetters,
    forecast: { drainMs: view.forecast.drainMs, binding: view.forecast.binding },
    pause: view.pause,
    breaker: view.breaker,
    deferralsTotal: view.rateLimited.llmq,
    providerRateLimitedTotal: view.rateLimited.provider,
  };
}

/** When the view was read and the range it draws. */
function timesOf(view: QueueView, h: UsageHistory) {
  return { now: view.now, windowMs: view.windowMs, bucketMs: h.bucketMs, from: h.from, to: h.to };
}

/**
 * The limiter page's view: the queue's live view, with what the fleet's calls that succeeded
 * reserved at admission and used, per 10 s bucket of the last 15 minutes (the usage history).
 */
async function limiterView(o: PageApiOptions, queue: string) {
  const { reader } = o;
  const view = await reader.read(queue);
  const names = { prefix: reader.prefix, queue };
  const h = await readUsageHistory(reader.redis, names, '15m', view.now, [FLEET_SERIES]);
  const points = h.series[0]!.points.map((p) => ({
    at: p.at,
    calls: p.calls,
    reservedIn: p.reservedInputTokens,
    reservedOut: p.reservedOutputTokens,
    actualIn: p.inputTokens,
    actualOut: p.outputTokens,
  }));
  return { ...view, history: { bucketMs: h.bucketMs, from: h.from, points } };
}

async function overview(o: PageApiOptions, queue: string, range: HistoryRange) {
  const { reader } = o;
  const view = await reader.read(queue);
  const names = { prefix: reader.prefix, queue };
  const h = await readUsageHistory(reader.redis, names, range, view.now);
  const [fleet, ...rest] = h.series;
  const of = (kind: string) =>
    rest
      .filter((s) => s.series.startsWith(kind))
      .map((s) => ({ name: s.series.slice(2), total: s.total }));
  return {
    ...timesOf(view, h),
    fleet: { points: fleet!.points, total: fleet!.total },
    tenants: of('t:'),
    models: of('m:'),
    current: current(view),
    spend: { configured: view.budgetsConfigured, lines: view.spend },
    limits: view.scopes.find((s) => s.scope === 'global') ?? null,
  };
}

/** The limiter scope a tenant or a model is charged to, as the snapshot has it. */
function scopeOf(view: QueueView, kind: 'tenant' | 'model', name: string): ScopeSnapshot | null {
  if (kind === 'tenant') return view.scopes.find((s) => s.scope === `tenant:${name}`) ?? null;
  const models = view.scopes.filter((s) => s.scope.startsWith('model:'));
  const pattern = matchModel(
    models.map((s) => s.scope.slice('model:'.length)),
    name,
  );
  return pattern === undefined ? null : models.find((s) => s.scope === `model:${pattern}`)!;
}

async function usage(
  o: PageApiOptions,
  queue: string,
  range: HistoryRange,
  kind: 'tenant' | 'model',
  name: string,
) {
  const { reader } = o;
  const view = await reader.read(queue);
  const names = { prefix: reader.prefix, queue };
  const series = kind === 'tenant' ? tenantSeries(name) : modelSeries(name);
  const [h, labels, jobs] = await Promise.all([
    readUsageHistory(reader.redis, names, range, view.now, [series]),
    historyLabels(reader.redis, names),
    kind === 'tenant' ? readTenantJobs(reader.redis, names, name) : undefined,
  ]);
  const budget = kind === 'tenant' ? `tenant:${name}` : `model:${name}`;
  const lines: SpendLine[] = view.spend.filter((l) => l.name === budget);
  const s = h.series[0]!;
  return {
    ...timesOf(view, h),
    points: s.points,
    total: s.total,
    known: (kind === 'tenant' ? labels.tenants : labels.models).includes(name),
    scope: {
      name: kind === 'tenant' ? `tenant:${name}` : 'model',
      snapshot: scopeOf(view, kind, name),
    },
    budgets: { configured: view.budgetsConfigured, budget, lines },
    jobs: jobs ?? null,
    current: current(view),
  };
}

/**
 * Registers the pages' JSON on the dashboard's server: `GET /api/overview`, `GET /api/usage`
 * and `GET /api/limiter` (the queue's live view, `QueueView`, with its chart's `history`).
 */
export function registerPageApi(app: FastifyInstance, o: PageApiOptions): void {
  const prefix = o.reader.prefix;
  app.get<{ Querystring: Query }>('/api/limiter', async (req, reply) => {
    reply.header('cache-control', 'no-store');
    const c = await chooseQueue(o, req.query.queue);
    const missing = queueMissing(reply, prefix, c);
    if (missing) return missing;
    const view = c.queue === undefined ? null : await limiterView(o, c.queue);
    return { prefix, queues: c.queues, view };
  });

  app.get<{ Querystring: Query }>('/api/overview', async (req, reply) => {
    reply.header('cache-control', 'no-store');
    const range = rangeOf(req.query.range);
    if (!range) return fail(reply, 400, 'BAD_RANGE', BAD_RANGE(req.query.range));
    const c = await chooseQueue(o, req.query.queue);
    const missing = queueMissing(reply, prefix, c);
    if (missing) return missing;
    const view = c.queue === undefined ? null : await overview(o, c.queue, range);
    return { prefix, queues: c.queues, queue: c.queue ?? null, range, view };
  });

  app.get<{ Querystring: Query }>('/api/usage', async (req, reply) => {
    reply.header('cache-control', 'no-store');
    const { kind, name } = req.query;
    const range = rangeOf(req.query.range);
    if (!range) return fail(reply, 400, 'BAD_RANGE', BAD_RANGE(req.query.range));
    if (kind !== 'tenant' && kind !== 'model')
      return fail(
        reply,
        400,
        'BAD_KIND',
        `kind must be tenant or model, got ${JSON.stringify(kind)}`,
      );
    if (typeof name !== 'string' || name === '' || name.length > 200)
      return fail(reply, 400, 'BAD_NAME', `name must name the ${kind} (1 to 200 characters)`);
    const c = await chooseQueue(o, req.query.queue);
    const missing = queueMissing(reply, prefix, c);
    if (missing) return missing;
    const view = c.queue === undefined ? null : await usage(o, c.queue, range, kind, name);
    return { prefix, queues: c.queues, queue: c.queue ?? null, range, kind, name, view };
  });
}
