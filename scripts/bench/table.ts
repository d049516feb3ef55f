/** Plain-text tables and number formats for the bench's output. */

/** Renders rows under headers, columns padded; numbers-looking cells are right-aligned. */
export function renderTable(
  headers: readonly string[],
  rows: readonly (readonly string[])[],
): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const numeric = headers.map(
    (_, i) =>
      i > 0 &&
      rows.length > 0 &&
      rows.every(
        (r) => /^[\d.,/%×\s-]*(s|ms|MB|B|×|%)?$/.test(r[i] ?? '') && !(r[i] ?? '').includes(', '),
      ),
  );
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => (numeric[i] ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(headers), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

/** `30.42 s` */
export const seconds = (ms: number | null | undefined, digits = 2): string =>
  ms === null || ms === undefined || !Number.isFinite(ms)
    ? '-'
    : `${(ms / 1000).toFixed(digits)} s`;

/** `98.3%` */
export const percent = (share: number | null | undefined, digits = 1): string =>
  share === null || share === undefined || !Number.isFinite(share)
    ? '-'
    : `${(share * 100).toFixed(digits)}%`;

/** `1.007×` */
export const ratio = (r: number | null | undefined, digits = 3): string =>
  r === null || r === undefined || !Number.isFinite(r) ? '-' : `${r.toFixed(digits)}×`;

/** `12,345` */
export const count = (n: number | null | undefined): string =>
  n === null || n === undefined || !Number.isFinite(n)
    ? '-'
    : Math.round(n).toLocaleString('en-US');

/** `143.2 MB` */
export const megabytes = (bytes: number | null | undefined): string =>
  bytes === null || bytes === undefined || !Number.isFinite(bytes)
    ? '-'
    : `${(bytes / 1024 / 1024).toFixed(1)} MB`;

/** `0.42 ms` */
export const millis = (ms: number | null | undefined, digits = 2): string =>
  ms === null || ms === undefined || !Number.isFinite(ms) ? '-' : `${ms.toFixed(digits)} ms`;

/** The p-th percentile (0..100) of numbers, nearest rank; NaN when empty. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[rank - 1]!;
}
