/**
 * The gate's paths beyond the plain ones. The plain gate peeks at each round's start and fetches
 * each job with a moveToActive of its own. Besides, by default, it peeks early (behind the last
 * round's fetches when rounds follow closely, with the idle wait's pop) and fetches along (with
 * the acquire, with a completion), each sparing a round trip; what each measured is in
 * scripts/bench/README.md ("Rules and their measured effect").
 */
export interface GatePaths {
  /** Peeks sent behind the last round's fetches and with the idle wait's pop. */
  readonly earlyPeeks: boolean;
  /** Fetches sent with the acquire (fetch-along.ts) and with a completion (handoff.ts). */
  readonly fetchesAlong: boolean;
}

/**
 * `LLMQ_GATE_PLAIN` is a bench switch, not a setting, read here and nowhere else: `1` turns off
 * every path beyond the plain ones, `peeks` only the early peeks, `fetches` only the fetches
 * along, so a bench run can measure each against the plain gate.
 */
export function gatePaths(env: NodeJS.ProcessEnv = process.env): GatePaths {
  const plain = env['LLMQ_GATE_PLAIN'];
  return {
    earlyPeeks: plain !== '1' && plain !== 'peeks',
    fetchesAlong: plain !== '1' && plain !== 'fetches',
  };
}
