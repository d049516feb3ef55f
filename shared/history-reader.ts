/**
 * Reads the usage history (see `history.ts`) into points per bucket and totals per range, with
 * the wait and latency quantiles worked out from the buckets' distributions. Reads only.
 */

import {
  type BucketFields,
  binBounds,
  FLEET_SERIES,
  type GateWaitMs,
  HISTORY_TIERS,
  type HistoryRange,
  historyKeys,
  mergeFields,
  type RecentJob,
} from './history.ts';
import type { QueueNames } from './keys.ts';
import { unpackLuaValue } from './lua-scripts.ts';
import type { RedisClient } from './redis.ts';

/** A distribution's count and quantiles (ms); null without a value. */
export interface Quantiles {
  readonly count: number;
  readonly p50: number | null;
  readonly p95: number | null;
  readonly meanMs: number | null;
}

/** One bucket of one series (or a range's total). Fleet-only figures are 0 elsewhere. */
export interface UsagePoint {
  /** Start of the bucket (ms; Redis time). */
  readonly at: number;
  /** Calls that succeeded. */
  readonly calls: number;
  /** Tries that failed, 429s included. */
  readonly failed: number;
  /** Uncached input plus cache writes: what input limits count. */
  readonly inputTokens: number;
  readonly outputTokens: number;
  /** What the calls that succeeded reserved at admission (the estimate), input and output. */
  readonly reservedInputTokens: number;
  readonly reservedOutputTokens: number;
  readonly spendUsd: number;
  /** From enqueue (or the previous try) to the call, over every try. */
  readonly wait: Quantiles;
  /** Provider calls that succeeded, request to whole response. */
  readonly latency: Quantiles;
  /** Calls that waited for llmq's own limits (budget, concurrency) before they were sent. */
  readonly deferred: number;
  /** The gate's waits of those calls, by reason, summed (ms). */
  readonly gateMs: GateWaitMs;
  /** 429s the provider sent. */
  readonly providerRateLimited: number;
  /** 5xx, 529 and connection errors. */
  readonly errors: number;
  readonly clientErrors: number;
  readonly retries: number;
  readonly deadLettered: number;
  /** Jobs set back to delayed by their scope's budget or a money budget. */
  readonly setBack: number;
  /** Jobs waiting when the bucket was last written; null when nothing wrote it. */
  readonly backlog: number | null;
  /** The most jobs waiting seen by a write in the bucket; null when nothing wrote it. */
  readonly backlogPeak: number | null;
}

export interface SeriesUsage {
  /** `*` (the fleet), `t:<tenant>` or `m:<model>`. */
  readonly series: string;
  /** One per bucket of the range, oldest first (empty buckets are zeros). */
  readonly points: readonly UsagePoint[];
  /** The whole range. */
  readonly total: UsagePoint;
}

export interface UsageHistory {
  readonly range: HistoryRange;
  readonly bucketMs: number;
  /** The first bucket's start and the current bucket's end (ms). */
  readonly from: number;
  readonly to: number;
  readonly series: readonly SeriesUsage[];
}

/**
 * The `p`th quantile (0..1) of a distribution by bin, interpolated within its bin, and within the
 * least and greatest values seen when they are known.
 */
export function quantileOf(
  bins: ReadonlyMap<number, number>,
  p: number,
  least = 0,
  greatest = Number.POSITIVE_INFINITY,
): number | null {
  const n = [...bins.values()].reduce((a, b) => a + b, 0);
  if (n <= 0) return null;
  const rank = p * n;
  let below = 0;
  const sorted = [...bins.keys()].sort((a, b) => a - b);
  for (const k of sorted) {
    const c = bins.get(k)!;
    if (below + c >= rank) {
      const [lo, hi] = binBounds(k);
      const from = Math.max(lo, least);
      const to = Math.max(from, Math.min(hi, greatest));
      return from + ((to - from) * Math.max(0, rank - below)) / c;
    }
    below += c;
  }
  return Math.min(binBounds(sorted.at(-1)!)[1], greatest);
}

/** Whether a stored value is msgpack (a map or an array), not an older build's text. */
const packed = (value: Buffer) =>
  value.length > 0 &&
  ((value[0]! >= 0x80 && value[0]! <= 0x9f) || (value[0]! >= 0xdc && value[0]! <= 0xdf));

/** A bucket: msgpack, its start under `@`; or an older build's `<start>;k=v;…`. */
function decodeBucket(value: Buffer): { at: number; fields: BucketFields } | undefined {
  if (packed(value)) {
    const { '@': at, ...fields } = unpackLuaValue(value) as BucketFields;
    return Number.isFinite(at) ? { at: at!, fields } : undefined;
  }
  const [head, ...rest] = value.toString().split(';');
  const at = Number(head);
  if (!Number.isFinite(at)) return undefined;
  const fields: BucketFields = {};
  for (const pair of rest) {
    const eq = pair.indexOf('=');
    if (eq > 0) fields[pair.slice(0, eq)] = Number(pair.slice(eq + 1));
  }
  return { at, fields };
}

function binsOf(f: BucketFields, prefix: 'w' | 'l'): Map<number, number> {
  const bins = new Map<number, number>();
  for (const [k, n] of Object.entries(f)) {
    if (k[0] === prefix && /^\d+$/.test(k.slice(1))) bins.set(Number(k.slice(1)), n);
  }
  return bins;
}

function quantiles(f: BucketFields, prefix: 'w' | 'l', sum: number): Quantiles {
  const bins = binsOf(f, prefix);
  const count = [...bins.values()].reduce((a, b) => a + b, 0);
  const round = (v: number | null) => (v === null ? null : Math.round(v));
  const q = (p: number) => round(quantileOf(bins, p, f[`${prefix}n`], f[`${prefix}x`]));
  return {
    count,
    p50: q(0.5),
    p95: q(0.95),
    meanMs: count > 0 ? Math.round(sum / count) : null,
  };
}

/** A bucket's fields as a point. */
export function pointOf(at: number, f: BucketFields, backlog = f['q'], peak = f['qx']): UsagePoint {
  const n = (k: string) => f[k] ?? 0;
  return {
    at,
    calls: n('c'),
    failed: n('f'),
    inputTokens: n('i'),
    outputTokens: n('o'),
    reservedInputTokens: n('ri'),
    reservedOutputTokens: n('ro'),
    spendUsd: n('s') / 1e6,
    wait: quantiles(f, 'w', n('ws')),
    latency: quantiles(f, 'l', n('ls')),
    deferred: n('d'),
    gateMs: { budget: n('gb'), paused: n('gp'), concurrency: n('gc'), queued: n('gq') },
    providerRateLimited: n('r'),
    errors: n('e'),
    clientErrors: n('k'),
    retries: n('y'),
    deadLettered: n('x'),
    setBack: n('z'),
    backlog: backlog ?? null,
    backlogPeak: peak ?? null,
  };
}

function sumFields(all: readonly BucketFields[]): BucketFields {
  const out: BucketFields = {};
  for (const { q: _last, qx: _peak, ...f } of all) mergeFields(out, f);
  return out;
}

/** Fields read from a tier's hash, by series, keyed by bucket start. */
type Raw = Map<string, Map<number, BucketFields>>;

async function readTier(
  redis: RedisClient,
  key: string,
  slots: number,
  only: readonly string[] | undefined,
): Promise<Raw> {
  const entries: [string, Buffer][] = [];
  if (only) {
    const fields = only.flatMap((s) => Array.from({ length: slots }, (_, i) => `${s}|${i}`));
    const values = fields.length > 0 ? await redis.hmgetBuffer(key, ...fields) : [];
    values.forEach((v, i) => {
      if (v !== null) entries.push([fields[i]!, v]);
    });
  } else {
    entries.push(...Object.entries(await redis.hgetallBuffer(key)));
  }
  const raw: Raw = new Map();
  for (const [field, value] of entries) {
    const series = field.slice(0, field.lastIndexOf('|'));
    const b = decodeBucket(value);
    if (!b) continue;
    const m = raw.get(series) ?? new Map<number, BucketFields>();
    m.set(b.at, b.fields);
    raw.set(series, m);
  }
  return raw;
}

/**
 * The history of a range at `now` (Redis time): `only` those series, or every series kept with
 * the fleet's first (zeros when nothing was written).
 */
export async function readUsageHistory(
  redis: RedisClient,
  names: QueueNames,
  range: HistoryRange,
  now: number,
  only?: readonly string[],
): Promise<UsageHistory> {
  const i = HISTORY_TIERS.findIndex((t) => t.range === range);
  if (i < 0) throw new RangeError(`range must be one of 15m, 1h, 24h, got ${range}`);
  const { bucketMs, slots } = HISTORY_TIERS[i]!;
  const current = Math.floor(now / bucketMs) * bucketMs;
  const from = current - (slots - 1) * bucketMs;
  const raw = await readTier(redis, historyKeys(names).tiers[i]!, slots, only);
  const wanted = only ?? [...new Set([FLEET_SERIES, ...[...raw.keys()].sort()])];
  const series: SeriesUsage[] = wanted.map((name) => {
    const buckets = raw.get(name) ?? new Map<number, BucketFields>();
    const inRange: BucketFields[] = [];
    let last: number | undefined;
    let peak: number | undefined;
    const points = Array.from({ length: slots }, (_, k) => {
      const at = from + k * bucketMs;
      const f = buckets.get(at) ?? {};
      if (buckets.has(at)) inRange.push(f);
      if (f['q'] !== undefined) last = f['q'];
      if (f['qx'] !== undefined) peak = Math.max(peak ?? 0, f['qx']);
      return pointOf(at, f);
    });
    return { series: name, points, total: pointOf(from, sumFields(inRange), last, peak) };
  });
  return { range, bucketMs, from, to: current + bucketMs, series };
}

/** The tenants and models the history keeps by name (without the `t:` / `m:`), sorted. */
export async function historyLabels(
  redis: RedisClient,
  names: QueueNames,
): Promise<{ tenants: string[]; models: string[] }> {
  const k = historyKeys(names);
  const [t, m] = await Promise.all([redis.smembers(k.tenants), redis.smembers(k.models)]);
  const strip = (s: string[]) => s.map((x) => x.slice(2)).sort();
  return { tenants: strip(t), models: strip(m) };
}

/** A tenant's latest finished tries, newest first (empty when it has none). */
export async function readRecentJobs(
  redis: RedisClient,
  names: QueueNames,
  tenant: string,
): Promise<RecentJob[]> {
  const raw = await redis.hgetBuffer(historyKeys(names).jobs, `t:${tenant}`);
  if (!raw) return [];
  try {
    // msgpack; JSON as an older build wrote it.
    const list = packed(raw) ? unpackLuaValue(raw) : (JSON.parse(raw.toString()) as unknown);
    return Array.isArray(list) ? (list as RecentJob[]) : [];
  } catch {
    return [];
  }
}

/** What the queue's history takes in Redis now (MEMORY USAGE of each of its keys), bytes. */
export async function historyMemoryBytes(redis: RedisClient, names: QueueNames): Promise<number> {
  const k = historyKeys(names);
  const sizes = await Promise.all(
    [...k.tiers, k.tenants, k.models, k.jobs].map(
      (key) => redis.call('MEMORY', 'USAGE', key, 'SAMPLES', '0') as Promise<number | null>,
    ),
  );
  return sizes.reduce<number>((a, b) => a + (b ?? 0), 0);
}
