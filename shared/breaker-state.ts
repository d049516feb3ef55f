import { breakerKey, type QueueNames } from './keys.ts';
import type { RedisClient } from './redis.ts';

/** Where the shared breaker stands; `half_open` while one process makes the trial call. */
export type BreakerState = 'closed' | 'open' | 'half_open';

/** The breaker as its script (`worker/lua/breaker-1.lua`) keeps it in the queue's breaker hash. */
export interface BreakerReading {
  readonly state: BreakerState;
  /** Consecutive provider failures. */
  readonly failures: number;
  /** When an open breaker lets a trial call through (ms, Redis's clock); null when none is set. */
  readonly openUntil: number | null;
  /** How many times it has opened. */
  readonly opened: number;
  /** The length of the outages that ended (ms). */
  readonly outageMs: number;
}

const STATES: ReadonlySet<string> = new Set<BreakerState>(['closed', 'open', 'half_open']);

const count = (v: string | undefined) => {
  const n = Number(v ?? 0);
  return Number.isFinite(n) ? n : 0;
};

/** The breaker's hash, read: an absent hash (or an unknown state) is a closed breaker. */
export function parseBreaker(h: Readonly<Record<string, string>>): BreakerReading {
  const state = h['state'];
  const openUntil = count(h['open_until']);
  return {
    state: state !== undefined && STATES.has(state) ? (state as BreakerState) : 'closed',
    failures: count(h['failures']),
    openUntil: openUntil > 0 ? openUntil : null,
    opened: count(h['opened_count']),
    outageMs: count(h['outage_ms']),
  };
}

/**
 * Reads the breaker of a queue, or of one deployment of its pool (one HGETALL, no write): what
 * the status and the dashboard show.
 */
export async function readBreaker(
  redis: RedisClient,
  names: QueueNames,
  deployment?: string,
): Promise<BreakerReading> {
  return parseBreaker(await redis.hgetall(breakerKey(names, deployment)));
}
