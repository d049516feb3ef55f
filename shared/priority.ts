/**
 * Priorities: 1 is the most urgent. Named lanes map to numbers with room between them, so a
 * caller can slot a job between two lanes.
 */
export const PRIORITY_LANES = { interactive: 10, default: 100, batch: 1_000 } as const;
export type PriorityLane = keyof typeof PRIORITY_LANES;
/** BullMQ's largest priority. */
export const MAX_PRIORITY = 2_097_152;

/** Resolves a lane name or a number to a priority; throws a TypeError naming the bad value. */
export function resolvePriority(p: PriorityLane | number | string | undefined): number {
  if (p === undefined || p === '') return PRIORITY_LANES.default;
  if (typeof p === 'string' && p in PRIORITY_LANES) return PRIORITY_LANES[p as PriorityLane];
  const n = typeof p === 'number' ? p : /^\d+$/.test(p) ? Number(p) : Number.NaN;
  if (!Number.isInteger(n) || n < 1 || n > MAX_PRIORITY) {
    throw new TypeError(
      `priority must be interactive, default, batch or a whole number from 1 to ${MAX_PRIORITY}, got ${JSON.stringify(p)}`,
    );
  }
  return n;
}
