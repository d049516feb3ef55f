/**
 * `/metrics` names the busiest tenants only: a fleet with thousands of tenants would otherwise
 * scrape megabytes (a scope's use and limits per dimension, four histograms per model). The
 * rest are summed into one scope `tenant:other` and one `tenant="other"` per model, so totals
 * still add up. The dashboard's pages read the views whole.
 */
import type { DimensionUse, ScopeSnapshot } from '../shared/limiter/types.ts';
import { type HistogramSeries, NO_TENANT } from '../shared/telemetry/histograms.ts';
import type { QueueView } from './fleet-reader.ts';

/** Tenants named in `/metrics` unless configured (`LLMQ_METRICS_TENANTS`). */
export const DEFAULT_METRICS_TENANTS = 10;

const OTHER = 'other';
const TENANT_SCOPE = 'tenant:';

/**
 * The tenants to name, at most `top`: the most calls in the current window (their scope's
 * requests), then the most calls counted by the histograms, then by name.
 */
export function busiestTenants(view: QueueView, top: number): Set<string> {
  const activity = new Map<string, { window: number; calls: number }>();
  const of = (t: string) => {
    const a = activity.get(t) ?? { window: 0, calls: 0 };
    activity.set(t, a);
    return a;
  };
  for (const s of view.scopes) {
    if (s.scope.startsWith(TENANT_SCOPE))
      of(s.scope.slice(TENANT_SCOPE.length)).window += s.dimensions.requests.used;
  }
  for (const h of view.histograms) {
    if (h.name === 'call' && h.tenant !== NO_TENANT) of(h.tenant).calls += h.count;
  }
  activity.delete(OTHER);
  const ranked = [...activity.entries()].sort(
    ([an, a], [bn, b]) => b.window - a.window || b.calls - a.calls || (an < bn ? -1 : 1),
  );
  return new Set(ranked.slice(0, top).map(([t]) => t));
}

/** The view with every tenant but the busiest `top` summed as `other`. */
export function capTenants(view: QueueView, top: number): QueueView {
  const named = busiestTenants(view, top);
  const kept = (tenant: string) => tenant === NO_TENANT || named.has(tenant);
  const scopes: ScopeSnapshot[] = [];
  const folded: ScopeSnapshot[] = [];
  for (const s of view.scopes) {
    const tenant = s.scope.startsWith(TENANT_SCOPE) ? s.scope.slice(TENANT_SCOPE.length) : null;
    (tenant === null || kept(tenant) ? scopes : folded).push(s);
  }
  if (folded.length > 0) scopes.push(sumScopes(`${TENANT_SCOPE}${OTHER}`, folded));
  const histograms: HistogramSeries[] = [];
  const others = new Map<string, HistogramSeries[]>();
  for (const h of view.histograms) {
    if (kept(h.tenant)) {
      histograms.push(h);
      continue;
    }
    const key = `${h.name}|${h.model}`;
    others.set(key, [...(others.get(key) ?? []), h]);
  }
  for (const series of others.values()) histograms.push(sumHistograms(series));
  return { ...view, scopes, histograms };
}

/** Sums of the defined values; undefined when none is. */
function sumDefined(values: readonly (number | undefined)[]): number | undefined {
  const defined = values.filter((v): v is number => v !== undefined);
  return defined.length > 0 ? defined.reduce((a, b) => a + b, 0) : undefined;
}

/** One scope holding the sum of `scopes`' use and limits. */
function sumScopes(scope: string, scopes: readonly ScopeSnapshot[]): ScopeSnapshot {
  const dimensions = {} as Record<string, DimensionUse>;
  for (const d of Object.keys(scopes[0]!.dimensions) as (keyof ScopeSnapshot['dimensions'])[]) {
    const uses = scopes.map((s) => s.dimensions[d]);
    dimensions[d] = {
      used: uses.reduce((a, u) => a + u.used, 0),
      limit: sumDefined(uses.map((u) => u.limit)),
      providerLimit: sumDefined(uses.map((u) => u.providerLimit)),
      providerRoom: sumDefined(uses.map((u) => u.providerRoom)),
      room: sumDefined(uses.map((u) => u.room)),
      perWindow: sumDefined(uses.map((u) => u.perWindow)),
    };
  }
  return {
    scope,
    shape: 'unknown',
    roundingStep: 0,
    dimensions: dimensions as ScopeSnapshot['dimensions'],
  };
}

/** One `other` series of a histogram and model, the sum of `series`. */
function sumHistograms(series: readonly HistogramSeries[]): HistogramSeries {
  const first = series[0]!;
  return {
    name: first.name,
    model: first.model,
    tenant: OTHER,
    buckets: first.buckets.map((b, i) => ({
      le: b.le,
      count: series.reduce((a, s) => a + (s.buckets[i]?.count ?? 0), 0),
    })),
    sum: series.reduce((a, s) => a + s.sum, 0),
    count: series.reduce((a, s) => a + s.count, 0),
  };
}
