import { DIMENSIONS } from '../dimensions.ts';
import { LimiterUnavailableError } from '../errors.ts';
import type { LimiterKeys } from './limiter-keys.ts';
import { type LimiterSettings, limitsOf, viewScopes } from './options.ts';
import type { LimiterScripts, ViewReply } from './scripts.ts';
import {
  type DimensionLimits,
  GLOBAL_SCOPE,
  type LimiterSnapshot,
  type ProviderShape,
  type ScopeSnapshot,
} from './types.ts';

const SHAPES: Record<string, ProviderShape> = { b: 'bucket', w: 'window' };

interface PublishedConfig {
  windowMs?: number;
  limits?: DimensionLimits;
  scopes?: Record<string, DimensionLimits>;
  concurrency?: number;
}

/** The limiter's state, read only; use and projected room by `view-4.lua` (acquire's own Lua). */
export async function readSnapshot(
  s: LimiterSettings,
  k: LimiterKeys,
  scripts: LimiterScripts,
): Promise<LimiterSnapshot> {
  const r = s.redis;
  const [config, totFields, pause, waiters, stats] = await Promise.all([
    r.get(k.config),
    r.hkeys(k.tot),
    r.get(k.pause),
    r.zcard(k.waiters),
    r.hgetall(k.stats),
  ]).catch((err: Error) => {
    throw new LimiterUnavailableError(err.message, { cause: err });
  });
  const published = config ? (JSON.parse(config) as PublishedConfig) : {};
  const windowMs = s.windowGiven ? s.windowMs : (published.windowMs ?? s.windowMs);
  // Every scope with limits, spent on or idle (an idle window's keys expire), and every spent one.
  const configured = [...Object.keys(s.scopes), ...Object.keys(published.scopes ?? {})];
  const names = new Set<string>([GLOBAL_SCOPE, ...configured]);
  for (const f of totFields) names.add(f.split('|')[0]!);
  const limits = Object.keys(s.limits).length > 0 ? s.limits : (published.limits ?? {});
  const known = { ...s, limits, scopes: { ...published.scopes, ...s.scopes } };
  const scopes = viewScopes(known, [...names]);
  const view = await scripts.view({ windowMs, headroom: s.headroom, scopes });
  const now = view.now;
  const inFlight = await r.zcount(k.slots, `(${now}`, '+inf');
  const n = (f: string) => Number(stats[f] ?? 0);
  return {
    now,
    windowMs,
    pausedUntil: pause && Number(pause) > now ? Number(pause) : null,
    inFlight,
    concurrency: s.concurrency || published.concurrency || undefined,
    waiters,
    scopes: [...names].map((scope) => scopeOf(scope, view, limitsOf(known, scope))),
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
    },
  };
}

/** Whole tokens (a bucket refills by fractions; the JSON of the script carries 14 digits). */
const whole = (x: number | undefined) => (x === undefined ? undefined : Math.floor(x + 1e-9));

/** One scope of a view: its use against its limits, the provider's readings, a call's room. */
export function scopeOf(scope: string, view: ViewReply, limits: DimensionLimits): ScopeSnapshot {
  const v = view.scopes[scope];
  const dims = {} as ScopeSnapshot['dimensions'];
  for (const d of DIMENSIONS) {
    const x = v?.dims[d.lua];
    dims[d.name] = {
      used: x?.used ?? 0,
      limit: limits[d.name],
      providerLimit: x?.limit,
      providerRoom: whole(x?.room),
      room: whole(x?.fit),
      perWindow: x?.most,
    };
  }
  return {
    scope,
    shape: SHAPES[v?.shape ?? ''] ?? 'unknown',
    roundingStep: v?.step ?? 0,
    dimensions: dims,
  };
}
