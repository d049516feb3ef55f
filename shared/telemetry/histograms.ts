/**
 * Fleet-wide histograms labelled by model and tenant, as fields of the queue's metrics hash
 * (`h|<histogram>|<model>|<tenant>|b_<bound>`, `…|sum`, `…|count`), added to by every worker in
 * the same command as the other counters. A value adds to its own bucket only (`b_<bound>`: the
 * values above the bound before it), three fields a value whatever the bounds; the reader sums
 * them into Prometheus's cumulative buckets. Label sets are bounded: past the first
 * {@link MAX_MODELS} models and {@link MAX_TENANTS} tenants a process has seen, values count as
 * `other`.
 */

/** The histograms, their unit and bucket bounds. */
export const HISTOGRAMS = {
  /** From enqueue (or the previous try's end) to the call's start: queue and gate. */
  wait: { unit: 'ms', bounds: [10, 100, 500, 1_000, 5_000, 15_000, 60_000, 300_000, 1_800_000] },
  /** The provider call, from request to the whole response. */
  call: { unit: 'ms', bounds: [100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 120_000] },
  input: { unit: 'tokens', bounds: [64, 256, 1_024, 4_096, 16_384, 65_536, 262_144] },
  output: { unit: 'tokens', bounds: [16, 64, 256, 1_024, 4_096, 16_384, 65_536] },
} as const;

export type HistogramName = keyof typeof HISTOGRAMS;

export const MAX_MODELS = 20;
export const MAX_TENANTS = 50;
/** The label of a tenant-less job. */
export const NO_TENANT = '-';

/** Keeps the first `max` distinct values; the rest read as `other`. */
export class LabelCap {
  private readonly seen = new Set<string>();
  constructor(private readonly max: number) {}

  label(value: string): string {
    // `|` separates the parts of a field name.
    const v = value.replace(/\|/g, '_').slice(0, 100);
    if (this.seen.has(v)) return v;
    if (this.seen.size >= this.max) return 'other';
    this.seen.add(v);
    return v;
  }
}

/** The increments that record `value` in a histogram for one label pair. */
export function histogramFields(
  name: HistogramName,
  model: string,
  tenant: string,
  value: number,
  into: Record<string, number> = {},
): Record<string, number> {
  const base = `h|${name}|${model}|${tenant}|`;
  const v = Math.max(0, Math.round(value));
  const bound = HISTOGRAMS[name].bounds.find((b) => v <= b);
  if (bound !== undefined) into[`${base}b_${bound}`] = (into[`${base}b_${bound}`] ?? 0) + 1;
  into[`${base}sum`] = (into[`${base}sum`] ?? 0) + v;
  into[`${base}count`] = (into[`${base}count`] ?? 0) + 1;
  return into;
}

/** One labelled series of a histogram, as read back. */
export interface HistogramSeries {
  readonly name: HistogramName;
  readonly model: string;
  readonly tenant: string;
  /** Cumulative counts per upper bound, in the histogram's unit. */
  readonly buckets: readonly { readonly le: number; readonly count: number }[];
  readonly sum: number;
  readonly count: number;
}

/**
 * The histogram series held in a metrics hash (other fields are ignored). Cumulative counts
 * (`le_<bound>`) written before buckets were kept one by one are added as they are.
 */
export function readHistograms(hash: Readonly<Record<string, number>>): HistogramSeries[] {
  const series = new Map<
    string,
    { name: HistogramName; model: string; tenant: string; f: Map<string, number> }
  >();
  for (const [field, n] of Object.entries(hash)) {
    if (!field.startsWith('h|')) continue;
    const [, name, model, tenant, part] = field.split('|');
    if (!name || !(name in HISTOGRAMS) || model === undefined || tenant === undefined || !part)
      continue;
    const key = `${name}|${model}|${tenant}`;
    let s = series.get(key);
    if (!s) {
      s = { name: name as HistogramName, model, tenant, f: new Map() };
      series.set(key, s);
    }
    s.f.set(part, n);
  }
  return [...series.values()].map(({ name, model, tenant, f }) => ({
    name,
    model,
    tenant,
    buckets: cumulative(HISTOGRAMS[name].bounds, f),
    sum: f.get('sum') ?? 0,
    count: f.get('count') ?? 0,
  }));
}

/** Each bound's count of values at or below it, from the buckets' own counts. */
function cumulative(bounds: readonly number[], f: ReadonlyMap<string, number>) {
  let below = 0;
  return bounds.map((le) => {
    below += f.get(`b_${le}`) ?? 0;
    return { le, count: below + (f.get(`le_${le}`) ?? 0) };
  });
}
