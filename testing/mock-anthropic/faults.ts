/**
 * Fault injection, decided by a seeded generator so a run can be replayed.
 *
 * Order: faults are decided for every valid, authenticated request that is not spend-capped,
 * BEFORE the rate limits, with one draw per request: u < overloaded → 529; then < overloaded +
 * serverError → 500; then < … + drop → the socket is destroyed without a response. A request
 * faulted this way is never charged (the front door refused it). A streaming request that was
 * admitted then takes a second draw: u < midStreamError → the stream fails after some deltas with
 * an `error` event; it was admitted, so it stays charged (less the unused output in 'actual' mode).
 */

import { mulberry32, type Random } from './prng.ts';

/** Fault rates, each a probability in [0, 1]. */
export interface FaultRates {
  overloaded: number;
  serverError: number;
  drop: number;
  midStreamError: number;
}

/**
 * One kind of fault the mock injects.
 * @inline
 */
export type FaultKind = keyof FaultRates;

/** A fault decided before admission, or null for none. */
export type FrontFault = 'overloaded' | 'serverError' | 'drop' | null;

export const NO_FAULTS: Readonly<FaultRates> = {
  overloaded: 0,
  serverError: 0,
  drop: 0,
  midStreamError: 0,
};

export interface FaultInjector {
  /** The fault, if any, for the next request before admission. Always draws once. */
  beforeAdmission(): FrontFault;
  /** Whether the next admitted stream fails midway. Always draws once. */
  midStream(): boolean;
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
      if (u < rates.overloaded) return 'overloaded';
      if (u < rates.overloaded + rates.serverError) return 'serverError';
      if (u < rates.overloaded + rates.serverError + rates.drop) return 'drop';
      return null;
    },
    midStream() {
      return random() < rates.midStreamError;
    },
    setRates(next) {
      rates = { ...next };
    },
    reset() {
      random = mulberry32(seed);
    },
  };
}
