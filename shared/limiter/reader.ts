import { DIMENSIONS, type Dimension } from '../dimensions.ts';
import { LimiterUnavailableError } from '../errors.ts';
import type { RedisClient } from '../redis.ts';
import type { LimiterKeys } from './limiter-keys.ts';
import {
  type DimensionLimits,
  GLOBAL_SCOPE,
  type HistoryPoint,
  type LimiterSnapshot,
  type ScopeSnapshot,
} from './types.ts';

/** Log scores at or below this are calls that left the window (see includes/expiry.lua). */
const GONE_FLOOR = -5e12;

/** How long a call that left the window stays in the log for late readings (as expiry.lua). */
export const goneKeepMs = (windowMs: number): number => Math.min(5_000, Math.floor(windowMs / 10));

/** How much of the live history a snapshot shows. */
const HISTORY_SPAN_MS = 15 * 60_000;

/** What a reader knows of the limiter besides Redis: its own settings, when it has them. */
export interface ReaderSettings {
  readonly redis: RedisClient;
  readonly keys: LimiterKeys;
  /** Undefined: the window the workers published. */
  readonly windowMs: number | undefined;
  readonly marginMs: number;
  readonly limits: DimensionLimits;
  readonly scopeLimits: Readonly<Record<string, DimensionLimits>>;
  readonly concurrency: number;
  readonly clock: (() => number) | undefined;
}

interface PublishedConfig {
  windowMs?: number;
  windowMarginMs?: number;
  limits?: DimensionLimits;
  scopes?: Record<string, DimensionLimits>;
  concurrency?: number;
}

/**
 * Another client's spend counted now for `field` of the ext hash: the held reading while it
 * lasts, then the one that follows it, or the latest reading when that is higher (`foreign_of`
 * in the Lua include `foreign`).
 */
export function foreignNow(ext: Record<string, string>, field: string, now: number): number {
  const live = (f: string) => (Number(ext[`${f}|until`] ?? 0) > now ? Number(ext[f] ?? 0) : 0);
  const held = Number(ext[`${field}|until`] ?? 0) > now ? live(field) : live(`${field}|next`);
  return Math.max(held, live(`${field}|last`));
}

/**
 * Whether acquire uses the whole limit of `field` (`seen_exactly` in the Lua include
 * `foreign-spend`): an exact reading less than a window old, its limit at least `limit`, and no
 * other client's spend held, rising or possible.
 */
export function wholeLimitNow(
  ext: Record<string, string>,
  field: string,
  limit: number | undefined,
  now: number,
): boolean {
  const live = (f: string) => Number(ext[`${f}|until`] ?? 0) > now;
  if (limit === undefined || !live(`${field}|exact`)) return false;
  if (Number(ext[`${field}|exact`]) < limit) return false;
  const none = (f: string) => !live(f) || Number(ext[f] ?? 0) === 0;
  return (
    foreignNow(ext, field, now) === 0 &&
    !live(`${field}|last`) &&
    none(`${field}|rise`) &&
    none(`${field}|seen`)
  );
}

/** A reservation as the res hash stores it: "requests|input|output|flags|scope1,scope2". */
function decodeReservation(enc: string): { spend: Record<Dimension, number>; scopes: string[] } {
  const [req, inp, out, , scopes = ''] = enc.split('|');
  const i = Number(inp);
  const o = Number(out);
  return {
    spend: { requests: Number(req), inputTokens: i, outputTokens: o, tokens: i + o },
    scopes: scopes.split(',').filter(Boolean),
  };
}

function rows<T>(result: [Error | null, unknown][] | null): T {
  return (result ?? []).map(([err, v]) => {
    if (err) throw new LimiterUnavailableError(err.message, { cause: err });
    return v;
  }) as T;
}

/**
 * Reads the limiter's state without writing anything: the totals are the running ones less
 * what has left the window but was not dropped yet (dropping is the write path's: acquire,
 * observe, and the idle worker's prune).
 */
export async function readSnapshot(s: ReaderSettings): Promise<LimiterSnapshot> {
  const k = s.keys;
  const [config, time] = rows<[string | null, [string, string] | null]>(
    await s.redis.pipeline().get(k.config).time().exec(),
  );
  const published = config ? (JSON.parse(config) as PublishedConfig) : {};
  const now = s.clock
    ? Math.floor(s.clock())
    : Number(time![0]) * 1000 + Math.floor(Number(time![1]) / 1000);
  const windowMs = s.windowMs ?? published.windowMs ?? 60_000;
  const marginMs =
    s.windowMs !== undefined ? s.marginMs : Math.max(s.marginMs, published.windowMarginMs ?? 0);
  const [tot, ext, pause, inFlight, waiters, stats, hist, left] = rows<
    [
      Record<string, string>,
      Record<string, string>,
      string | null,
      number,
      number,
      Record<string, string>,
      Record<string, string>,
      string[],
    ]
  >(
    await s.redis
      .multi()
      .hgetall(k.tot)
      .hgetall(k.ext)
      .get(k.pause)
      .zcount(k.slots, now, '+inf')
      .zcard(k.waiters)
      .hgetall(k.stats)
      .hgetall(k.hist)
      // Above GONE_FLOOR: what expire_log keeps of calls that left (`~id`) is out already.
      .zrangebyscore(k.log, `(${GONE_FLOOR}`, now - (windowMs + marginMs))
      .exec(),
  );
  // Reservations that left the window but are still in the totals: taken off here, not in Redis.
  const gone: Record<string, number> = {};
  if (left.length > 0) {
    const encs = await s.redis.hmget(k.res, ...left);
    for (const enc of encs) {
      if (!enc) continue;
      const r = decodeReservation(enc);
      for (const scope of r.scopes)
        for (const d of DIMENSIONS)
          gone[`${scope}|${d.lua}`] = (gone[`${scope}|${d.lua}`] ?? 0) + r.spend[d.name];
    }
  }
  const limitsOf = (scope: string): DimensionLimits =>
    scope === GLOBAL_SCOPE
      ? Object.keys(s.limits).length > 0
        ? s.limits
        : (published.limits ?? {})
      : (s.scopeLimits[scope] ?? published.scopes?.[scope] ?? {});
  const names = new Set<string>([GLOBAL_SCOPE, ...Object.keys(s.scopeLimits)]);
  for (const f of Object.keys(tot)) names.add(f.split('|')[0]!);
  const scopes: ScopeSnapshot[] = [...names].map((scope) => {
    const dims = {} as ScopeSnapshot['dimensions'];
    for (const d of DIMENSIONS) {
      const f = `${scope}|${d.lua}`;
      const limit = limitsOf(scope)[d.name];
      dims[d.name] = {
        used: Number(tot[f] ?? 0) - (gone[f] ?? 0),
        limit,
        foreign: foreignNow(ext, f, now),
        wholeLimit: wholeLimitNow(ext, f, limit, now),
      };
    }
    return { scope, dimensions: dims };
  });
  const n = (f: string) => Number(stats[f] ?? 0);
  const pausedUntil = pause && Number(pause) > now ? Number(pause) : null;
  // A probe holds the others until its reading, its call's end or its time, whichever first.
  const probeId = ext['probe'];
  const probeEnd = Number(ext['probe|until'] ?? 0);
  const probeUntil =
    probeId && probeEnd > now && (await s.redis.zscore(k.slots, probeId)) !== null
      ? probeEnd
      : null;
  return {
    now,
    windowMs,
    pausedUntil,
    probeUntil,
    inFlight,
    concurrency: s.concurrency || published.concurrency || undefined,
    waiters,
    scopes,
    counters: {
      admitted: n('admitted'),
      deniedBudget: n('denied_budget'),
      deniedSlots: n('denied_slots'),
      settled: n('settled'),
      released: n('released'),
      reservedIn: n('reserved_in'),
      reservedOut: n('reserved_out'),
      actualIn: n('actual_in'),
      actualOut: n('actual_out'),
      settledReservedIn: n('settled_reserved_in'),
      settledReservedOut: n('settled_reserved_out'),
      probes: n('probes'),
    },
    history: historyOf(hist, now),
  };
}

/** The history hash ("bucket|name" → count) as points, oldest first. */
function historyOf(hist: Record<string, string>, now: number): HistoryPoint[] {
  const buckets = new Map<number, Record<string, number>>();
  for (const [f, v] of Object.entries(hist)) {
    const [at, name] = f.split('|') as [string, string];
    const b = buckets.get(Number(at)) ?? {};
    b[name] = Number(v);
    buckets.set(Number(at), b);
  }
  return [...buckets.entries()]
    .filter(([at]) => at > now - HISTORY_SPAN_MS)
    .sort(([a], [b]) => a - b)
    .map(([at, b]) => ({
      at,
      calls: b['calls'] ?? 0,
      reservedIn: b['reserved_in'] ?? 0,
      reservedOut: b['reserved_out'] ?? 0,
      actualIn: b['actual_in'] ?? 0,
      actualOut: b['actual_out'] ?? 0,
    }));
}
