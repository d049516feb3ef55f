/**
 * Health probes, as every llmq server answers them (`/healthz`, `/readyz` of the worker, `serve`
 * and the dashboard): 200 or 503 with `{ "status", "reasons"? }`, each reason a sentence an
 * operator can act on.
 */
import type { RedisClient } from './redis.ts';

/** A probe's verdict: ok, or the reasons it is not. */
export interface ProbeVerdict {
  readonly ok: boolean;
  readonly reasons: readonly string[];
}

export const verdict = (reasons: readonly string[]): ProbeVerdict => ({
  ok: reasons.length === 0,
  reasons,
});

/** A probe's HTTP answer: `{ status: ok }` with 200, or `{ status: failing, reasons }` with 503. */
export function probeAnswer(
  v: ProbeVerdict,
  words: { readonly ok: string; readonly failing: string },
): { status: 200 | 503; body: { status: string; reasons?: readonly string[] } } {
  return v.ok
    ? { status: 200, body: { status: words.ok } }
    : { status: 503, body: { status: words.failing, reasons: v.reasons } };
}

/** Why Redis is not answering (no PONG within `timeoutMs`), or undefined when it answers. */
export async function redisSilence(
  redis: RedisClient,
  timeoutMs: number,
): Promise<string | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    await Promise.race([redis.ping(), late]);
    return undefined;
  } catch (err) {
    return `Redis did not answer PING (${(err as Error).message})`;
  } finally {
    clearTimeout(timer);
  }
}
