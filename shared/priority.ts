import { PRIORITY_LIMIT } from 'bullmq';
import { RequestValidationError } from './errors.ts';

/**
 * Priorities: 1 is the most urgent. Named lanes map to numbers with room between them, so a
 * caller can slot a job between two lanes.
 */
export const PRIORITY_LANES = { interactive: 10, default: 100, batch: 1_000 } as const;
export type PriorityLane = keyof typeof PRIORITY_LANES;
/** The least urgent priority: BullMQ's own limit (2097151), so nothing reaches it that it refuses. */
export const MAX_PRIORITY: number = PRIORITY_LIMIT;

const LANES = new Map<string, number>(Object.entries(PRIORITY_LANES));

/**
 * Resolves a lane name or a number to a priority, the one rule of every door (library, CLI,
 * job API, gateway header, batch, keys file). Throws a RequestValidationError naming `field`
 * and the bad value.
 */
export function resolvePriority(p: unknown, field = 'priority'): number {
  if (p === undefined || p === '') return PRIORITY_LANES.default;
  const n = typeof p === 'string' ? (LANES.get(p) ?? wholeNumber(p)) : p;
  if (typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= MAX_PRIORITY) return n;
  throw new RequestValidationError([{ field, message: priorityProblem(p) }]);
}

/** What is wrong with a priority, with the bad value (cut short). */
function priorityProblem(p: unknown): string {
  const shown = (typeof p === 'string' ? JSON.stringify(p) : String(p)).slice(0, 80);
  return `must be interactive, default, batch or a whole number from 1 to ${MAX_PRIORITY}, got ${shown}`;
}

function wholeNumber(s: string): number | undefined {
  return /^\d{1,8}$/.test(s) ? Number(s) : undefined;
}

/** The problem a {@link resolvePriority} error names, for doors that phrase their own errors. */
export function issueOf(err: unknown): string {
  return err instanceof RequestValidationError
    ? (err.issues[0]?.message ?? err.message)
    : String(err);
}
