/**
 * Whether the gate takes only its plain paths: a peek at each round's start, one moveToActive
 * per job. Otherwise it also peeks early (behind the last round's fetches, with the idle wait's
 * pop) and fetches along (with the acquire, with a completion), each sparing a round trip; what
 * each measured is in scripts/bench/README.md ("Rules and their measured effect").
 *
 * `LLMQ_GATE_PLAIN=1` is a bench switch, not a setting: it is read here and nowhere else, so a
 * bench run can measure the plain gate against the full one.
 */
export function gatePlain(env: NodeJS.ProcessEnv = process.env): boolean {
  return env['LLMQ_GATE_PLAIN'] === '1';
}
