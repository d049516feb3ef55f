/**
 * Fault injection, decided by a seeded generator so a run can be replayed.
 *
 * Order: faults are decided for every valid, authenticated request that is not spend-capped,
 * BEFORE the rate limits, with one draw per request: u < overloaded → 529; then < overloaded +
 * serverError → 500; then < … + drop → the socket is destroyed without a response; then < … +
 * hang → the request is read and never answered (a load balancer that accepts and goes silent:
 * no headers, no byte, the connection open until the client gives up). A request faulted this
 * way is never charged (the front door refused it). A streaming request that was admitted then
 * takes a second draw: u < midStreamError → the stream fails after some deltas with an `error`
 * event; then < midStreamError + stall → it stops after some deltas and stays open, silent. It
 * was admitted, so it stays charged (less the unused output in 'actual' mode).
 */

import { mulberry32, type Random } from './prng.ts';

/** Fault rates, each a probability in [0, 1]. */
export interface FaultRates {
  overloaded: number;
  serverError: number;
  drop: number;
  /** Accepted, never answered (no headers): counted in `responses` as `"hung"`. */
  hang: number;
  midStreamError: number;
  /** A stream that goes silent after some deltas, its connection left open. */
  stall: number;
}

/**
 * One kind of fault the mock injects.
 * @inline
 */
export type FaultKind = keyof FaultRates;

/** A fault decided before admission, or null for none. */
export type FrontFault = 'overloaded' | 'serverError' | 'drop' | 'hang' | null;

/** What becomes of an admitted stream midway: an `error` event, silence, or nothing. */
export type MidwayFault = 'error' | 'stall' | null;

/** The rates drawn together, whose sum must be at most 1: before admission, and midway. */
export const FAULT_GROUPS: readonly (readonly FaultKind[])[] = [
  ['overloaded', 'serverError', 'drop', 'hang'],
  ['midStreamError', 'stall'],
];

export const NO_FAULTS: Readonly<FaultRates> = {
  overloaded: 0,
  serverError: 0,
  drop: 0,
  hang: 0,
  midStreamError: 0,
  stall: 0,
};

export interface FaultInjector {
  /** The fault, if any, for the next request before admission. Always draws once. */
  beforeAdmission(): FrontFault;
  /** What becomes of the next admitted stream midway. Always draws once. */
  midStream(): MidwayFault;
  setRates(rates: FaultRates): void;
  /** Restarts the generator from the seed. */
  reset(): void;
}

export function createFaultInjector(seed: number, initial: FaultRates): FaultInjector {
  let rates = { ...initial };
  let random: Random = mulberry32(seed);
  return {
    beforeAdmission() {
      // Drawn even when every rate is 0, so the sequence does not depend on when faults are set.
      const u = random();
      let bound = 0;
      for (const kind of ['overloaded', 'serverError', 'drop', 'hang'] as const) {
        bound += rates[kind];
        if (u < bound) return kind;
      }
      return null;
    },
    midStream() {
      const u = random();
      if (u < rates.midStreamError) return 'error';
      if (u < rates.midStreamError + rates.stall) return 'stall';
      return null;
    },
    setRates(next) {
      rates = { ...next };
    },
    reset() {
      random = mulberry32(seed);
    },
  };
}
