/**
 * The fleet's usage history: what every worker's calls did, downsampled into buckets of three
 * sizes, one per range the dashboard shows (15 min of 10 s, 1 h of 1 min, 24 h of 10 min). It
 * is written on the write path, with the counters (`MetricsWriter`), in one script
 * (`lua/history-9.lua`); reading it writes nothing.
 *
 * Layout, under the queue's hash tag: one hash per tier, field `<series>|<slot>` → one bucket
 * (msgpack: a map of its fields, its start under `@`), where a series is the fleet (`*`), a
 * tenant (`t:<name>`) or a model (`m:<name>`), and the slot is the bucket's number modulo the
 * tier's slots (a ring: the oldest bucket is overwritten). Past {@link HISTORY_MAX_TENANTS} tenants and
 * {@link HISTORY_MAX_MODELS} models a queue has kept, others count as `other`. Each key expires
 * one range after its last write. So the history is bounded whatever the load: see
 * docs/dashboard.md for its size per queue.
 */

import { bullPrefix, historyKey, type QueueNames } from './keys.ts';
import { loadLuaScripts, packLuaArg, runLua } from './lua-scripts.ts';
import type { RedisClient } from './redis.ts';

const SCRIPT = loadLuaScripts(new URL('./lua', import.meta.url).pathname)['history']!;

/** The three sizes of bucket and how many of each are kept. */
export const HISTORY_TIERS = [
  { range: '15m', bucketMs: 10_000, slots: 90 },
  { range: '1h', bucketMs: 60_000, slots: 60 },
  { range: '24h', bucketMs: 600_000, slots: 144 },
] as const;

export type HistoryRange = (typeof HISTORY_TIERS)[number]['range'];
export const HISTORY_RANGES: readonly HistoryRange[] = HISTORY_TIERS.map((t) => t.range);

/** Tenants and models kept by name per queue; the rest are `other`. */
export const HISTORY_MAX_TENANTS = 20;
export const HISTORY_MAX_MODELS = 10;
/** Latest finished jobs kept per tenant. */
export const HISTORY_JOBS_PER_TENANT = 20;

/** The fleet's series; a tenant's is `t:<name>`, a model's `m:<name>`. */
export const FLEET_SERIES = '*';
/** `|` ends a series' name in a field; names are cut at 100 characters. */
const labelOf = (name: string) => name.replace(/\|/g, '_').slice(0, 100);
export const tenantSeries = (tenant: string) => `t:${labelOf(tenant)}`;
export const modelSeries = (model: string) => `m:${labelOf(model)}`;

export interface HistoryKeys {
  readonly tiers: readonly string[];
  readonly tenants: string;
  readonly models: string;
  readonly jobs: string;
}

export function historyKeys(names: QueueNames): HistoryKeys {
  return {
    tiers: HISTORY_TIERS.map((_, i) => historyKey(names, `tier:${i}`)),
    tenants: historyKey(names, 'tenants'),
    models: historyKey(names, 'models'),
    jobs: historyKey(names, 'jobs'),
  };
}

/**
 * A bucket's fields. Per call (every series): `c` calls that succeeded, `f` tries that failed
 * (429s included), `i` / `o` input (uncached plus cache writes) and output tokens, `ri` / `ro`
 * what the calls that succeeded reserved at admission (the estimate), `s` spend in
 * µ$ at list price (the config's prices with budgets), `ws` / `ls` summed wait and latency ms,
 * `w<bin>` / `l<bin>` their distributions (see {@link binOf}), `wn` / `wx` and `ln` / `lx` their
 * least and greatest values, `d` calls that waited for llmq's
 * own limits first, and the gate's wait by reason in ms: `gb` budget (tokens, requests, money),
 * `gp` the provider (the shared pause after a 429, the open breaker), `gc` concurrency (the fleet's cap or this process's
 * slots), `gq` queued behind another waiter. Fleet only, from the counters: `r` 429s the provider
 * sent, `e` 5xx and connection errors, `k` other 4xx, `y` retries, `x` dead letters, `z` jobs set
 * back to delayed by their budget or scope, and the gauges `q` and `qx`: jobs waiting (wait,
 * prioritized, delayed) when the bucket was last written, and the most seen in it.
 */
export type BucketFields = Record<string, number>;

/**
 * The distribution's bin of a value in ms: 0 below 1 ms, then bins √2 wide, bin `k` holding
 * [2^((k-1)/2), 2^(k/2)); the last (63) holds everything from about 25 days.
 */
export function binOf(ms: number): number {
  if (!(ms >= 1)) return 0;
  return Math.min(63, Math.floor(2 * Math.log2(ms)) + 1);
}

/** The bounds of bin `k` in ms. */
export function binBounds(k: number): [number, number] {
  return k <= 0 ? [0, 1] : [2 ** ((k - 1) / 2), 2 ** (k / 2)];
}

/** The gate's wait of a call, by reason (ms), as the history counts it. */
export interface GateWaitMs {
  readonly budget: number;
  readonly paused: number;
  readonly concurrency: number;
  readonly queued: number;
}

/** One finished try of a job, as the history records it. */
export interface HistoryCall {
  readonly jobId?: string | undefined;
  readonly model: string;
  readonly tenant: string | undefined;
  readonly ok: boolean;
  readonly waitMs: number;
  readonly callMs: number;
  /** Uncached input tokens, as the usage reports them. */
  readonly inputTokens?: number | undefined;
  readonly outputTokens?: number | undefined;
  /** Input written to the prompt cache: counted toward input limits too. */
  readonly cacheWriteTokens?: number | undefined;
  /** What the call cost, µ$. */
  readonly costMicros?: number | undefined;
  /** Input and output tokens its reservation held at admission (the estimate). */
  readonly reservedInputTokens?: number | undefined;
  readonly reservedOutputTokens?: number | undefined;
  readonly gate?: GateWaitMs | undefined;
}

const add = (into: BucketFields, field: string, n: number | undefined) => {
  if (n !== undefined && n !== 0 && Number.isFinite(n)) into[field] = (into[field] ?? 0) + n;
};

/** Fields kept as the least (`…n`) or greatest (`…x`) value, not summed. */
export const MIN_FIELDS = new Set(['wn', 'ln']);
export const MAX_FIELDS = new Set(['wx', 'lx']);

/** Merges `from` into `into`: sums, but the least and greatest of the extremes. */
export function mergeFields(into: BucketFields, from: Readonly<BucketFields>): BucketFields {
  for (const [k, v] of Object.entries(from)) {
    const old = into[k];
    if (old === undefined) into[k] = v;
    else if (MIN_FIELDS.has(k)) into[k] = Math.min(old, v);
    else if (MAX_FIELDS.has(k)) into[k] = Math.max(old, v);
    else into[k] = old + v;
  }
  return into;
}

/** The fields one call adds to each of its series. */
export function callFields(c: HistoryCall, into: BucketFields = {}): BucketFields {
  const wait = Math.max(0, Math.round(c.waitMs));
  add(into, c.ok ? 'c' : 'f', 1);
  add(into, 'ws', wait);
  add(into, `w${binOf(wait)}`, 1);
  mergeFields(into, { wn: wait, wx: wait });
  if (c.ok) {
    const call = Math.max(0, Math.round(c.callMs));
    add(into, 'ls', call);
    add(into, `l${binOf(call)}`, 1);
    mergeFields(into, { ln: call, lx: call });
  }
  add(into, 'i', (c.inputTokens ?? 0) + (c.cacheWriteTokens ?? 0));
  add(into, 'o', c.outputTokens);
  add(into, 'ri', c.reservedInputTokens);
  add(into, 'ro', c.reservedOutputTokens);
  add(into, 's', c.costMicros);
  const g = c.gate;
  if (g) {
    add(into, 'gb', Math.round(g.budget));
    add(into, 'gp', Math.round(g.paused));
    add(into, 'gc', Math.round(g.concurrency));
    add(into, 'gq', Math.round(g.queued));
    if (g.budget + g.concurrency > 0) add(into, 'd', 1);
  }
  return into;
}

/** The counters (`MetricsWriter.add`) the fleet's series keeps, by the field they go to. */
const COUNTER_FIELDS: Readonly<Record<string, string>> = {
  provider_429_retry_after: 'r',
  provider_429_final: 'r',
  provider_5xx: 'e',
  provider_connection_errors: 'e',
  provider_4xx: 'k',
  retries: 'y',
  dead_lettered: 'x',
  deferred_by_scope: 'z',
  deferred_by_budget: 'z',
};

/** The fleet fields some counters add (the others are not history). */
export function counterFields(
  counters: Readonly<Record<string, number>>,
  into: BucketFields = {},
): BucketFields {
  for (const [name, n] of Object.entries(counters)) {
    const field = COUNTER_FIELDS[name];
    if (field) add(into, field, n);
  }
  return into;
}

/** A tenant's finished try, as its page lists it. */
export interface RecentJob {
  readonly id: string;
  readonly ok: boolean;
  /** When it was recorded (ms since the epoch). */
  readonly at: number;
  readonly model: string;
}

/** What one write adds: fields by series, and tenants' finished jobs (newest last). */
export interface HistoryBatch {
  readonly series: Record<string, BucketFields>;
  readonly jobs: [tenant: string, job: RecentJob][];
}

/** Adds a call to a batch: to the fleet, its tenant's and its model's series. */
export function addCall(batch: HistoryBatch, c: HistoryCall, at: number): void {
  const names = [FLEET_SERIES, modelSeries(c.model)];
  if (c.tenant !== undefined) names.push(tenantSeries(c.tenant));
  for (const name of names) batch.series[name] = callFields(c, batch.series[name]);
  if (c.tenant !== undefined && c.jobId !== undefined)
    batch.jobs.push([labelOf(c.tenant), { id: c.jobId, ok: c.ok, at, model: c.model }]);
}

/** A new, empty batch (the fleet's series present: every write samples the backlog). */
export function newBatch(): HistoryBatch {
  return { series: { [FLEET_SERIES]: {} }, jobs: [] };
}

/**
 * Tenants written by one script call: a flush with more tenants is split, so no call blocks
 * Redis for longer as the tenants grow (the whole flush costs the same).
 */
export const HISTORY_TENANTS_PER_CALL = 50;

/**
 * Writes a batch to the queue's history, at `now` (an injected clock) or Redis's TIME. Called by
 * `MetricsWriter` with each flush of the counters.
 */
export function writeHistory(
  redis: RedisClient,
  names: QueueNames,
  batch: HistoryBatch,
  now?: number,
): Promise<unknown> {
  const k = historyKeys(names);
  const bull = `${bullPrefix(names)}:${names.queue}:`;
  const keys = [...k.tiers, k.tenants, k.models, k.jobs];
  keys.push(`${bull}wait`, `${bull}prioritized`, `${bull}delayed`);
  return Promise.all(
    splitByTenants(batch).map((part) => runLua(redis, SCRIPT, keys, [historyArgument(part, now)])),
  );
}

/**
 * A batch as parts of at most {@link HISTORY_TENANTS_PER_CALL} tenants each, every tenant's
 * series and finished jobs in one part (only its latest {@link HISTORY_JOBS_PER_TENANT} jobs:
 * its list keeps no more); the fleet's and the models' series in the first.
 */
export function splitByTenants(batch: HistoryBatch): HistoryBatch[] {
  const jobsOf = new Map<string, HistoryBatch['jobs']>();
  for (const pair of batch.jobs) {
    const series = tenantSeries(pair[0]);
    const list = jobsOf.get(series) ?? [];
    list.push(pair);
    if (list.length > HISTORY_JOBS_PER_TENANT) list.shift();
    jobsOf.set(series, list);
  }
  const isTenant = (name: string) => name.startsWith('t:');
  const tenants = [...new Set([...Object.keys(batch.series).filter(isTenant), ...jobsOf.keys()])];
  const first = newBatch();
  for (const [name, fields] of Object.entries(batch.series)) {
    if (!isTenant(name)) first.series[name] = fields;
  }
  const parts = [first];
  tenants.forEach((name, i) => {
    if (i > 0 && i % HISTORY_TENANTS_PER_CALL === 0) parts.push(newBatch());
    const part = parts.at(-1)!;
    if (batch.series[name]) part.series[name] = batch.series[name];
    part.jobs.push(...(jobsOf.get(name) ?? []));
  });
  return parts;
}

function historyArgument(batch: HistoryBatch, now?: number): Buffer {
  return packLuaArg({
    now,
    series: batch.series,
    jobs: batch.jobs,
    tiers: HISTORY_TIERS.map((t) => [t.bucketMs, t.slots]),
    maxTenants: HISTORY_MAX_TENANTS,
    maxModels: HISTORY_MAX_MODELS,
    keepJobs: HISTORY_JOBS_PER_TENANT,
  });
}
