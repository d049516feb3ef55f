/** Durations as people write them: `500ms`, `90s`, `10m`, `2h`, `7d`. */

const UNITS: Readonly<Record<string, number>> = {
  ms: 1,
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

/**
 * Milliseconds of a duration with a unit (`90s`, `1.5h`), or undefined when `text` is not one.
 * `0` alone is allowed: a zero needs no unit.
 */
export function durationMs(text: string): number | undefined {
  const t = text.trim();
  if (/^0+(\.0+)?$/.test(t)) return 0;
  const m = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)$/.exec(t);
  return m ? Math.round(Number(m[1]) * UNITS[m[2]!]!) : undefined;
}

/** `850ms`, `12.5s`, `10m 0s`, `2h 5m 0s`: a span for a reason line. */
export function formatSpan(ms: number): string {
  if (ms < 1_000) return `${Math.max(0, Math.round(ms))}ms`;
  if (ms < 60_000) return `${Number((ms / 1_000).toFixed(1))}s`;
  const s = Math.floor(ms / 1_000);
  const h = Math.floor(s / 3_600);
  const m = Math.floor((s % 3_600) / 60);
  return h > 0 ? `${h}h ${m}m ${s % 60}s` : `${m}m ${s % 60}s`;
}
