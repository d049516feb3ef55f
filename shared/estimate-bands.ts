/**
 * Size bands of llmq's input estimate, learned apart: a provider that counts a per-message
 * overhead llmq does not (or counts one llmq does) gives a ratio that moves with the request's
 * size, fastest where the overhead is much of the request. A band starts at each power of 2
 * and at 1.5 times it (…, 16, 24, 32, 48, 64, 96, …): it spans ×1.5 or ×1.33, so within one the
 * ratio moves little, and short calls of 35 estimated tokens (ratio 0.46 for a provider counting
 * characters / 3.6 + 7 a message) and documents of 56 (0.63) learn apart, which they would not
 * in bands of powers of 2 (32–63) or 4 (16–63).
 */

/** What one band learned, as stored (`lua/learnBands-2.lua`). */
export interface BandRatio {
  /** Warm: the ratio to reserve with; cold: the largest of its latest ratios. */
  readonly ratio: number;
  /** At least `minSamples` settles: its own ratio is trusted. */
  readonly warm: boolean;
  /** Settles recorded in the band. */
  readonly observations: number;
}

/** The bands learned of one model, by their first estimate. */
export type BandRatios = ReadonlyMap<number, BandRatio>;

/** The band of an estimate (a whole number of tokens from 1 up): its first estimate. */
export function bandOf(estimate: number): number {
  let p = 1;
  while (p * 2 <= estimate) p *= 2;
  return p >= 2 && estimate >= p * 1.5 ? p * 1.5 : p;
}

/** The last estimate of a band. */
export function bandEnd(band: number): number {
  const p = bandOf(band);
  const next = p === 1 ? 2 : Number.isInteger(Math.log2(p)) ? p * 1.5 : (p / 3) * 4;
  return next - 1;
}

/**
 * The ratio to reserve an estimate of `band` with. A warm band: its own. A cold band never
 * extrapolates: between two warm bands it takes the larger of the nearest below and above (and
 * never less than its own latest ratios); otherwise the estimate as is, or its latest ratios
 * when they were larger.
 */
export function reserveRatio(bands: BandRatios, band: number): number {
  const own = bands.get(band);
  if (own?.warm) return own.ratio;
  let below: BandRatio | undefined;
  let above: BandRatio | undefined;
  let belowAt = Number.NEGATIVE_INFINITY;
  let aboveAt = Number.POSITIVE_INFINITY;
  for (const [at, b] of bands) {
    if (!b.warm) continue;
    if (at < band && at > belowAt) [below, belowAt] = [b, at];
    if (at > band && at < aboveAt) [above, aboveAt] = [b, at];
  }
  const recent = own?.ratio ?? 0;
  if (below && above) return Math.max(below.ratio, above.ratio, recent);
  return Math.max(1, recent);
}
