import type { QueueNames } from '../../shared/keys.ts';
import { Limiter } from '../../shared/limiter/limiter.ts';
import type { Dimension, LimiterSnapshot } from '../../shared/limiter/types.ts';
import type { RedisClient } from '../../shared/redis.ts';

/** What the limiter said while a run lasted, sampled every `everyMs`. */
export interface LimiterWatchReport {
  readonly samples: number;
  /** The global scope's foreign spend per dimension: mean and largest over the samples. */
  readonly foreignMean: Readonly<Record<Dimension, number>>;
  readonly foreignMax: Readonly<Record<Dimension, number>>;
  /**
   * The two parts of it (observe-5.lua): `certain`, what the reading showed beyond every call
   * of ours, held up to a window; `possible`, beyond the calls of ours whose response had
   * begun, held until the next reading. Largest over the samples.
   */
  readonly certainMax: Readonly<Record<Dimension, number>>;
  readonly possibleMax: Readonly<Record<Dimension, number>>;
  /** Actual over reserved input of the settled calls, all of them and after the first 50. */
  readonly accuracy: number;
  readonly accuracyAfter50: number;
  readonly settled: number;
}

const DIMS: readonly Dimension[] = ['requests', 'inputTokens', 'outputTokens', 'tokens'];
const LUA_DIMS = ['req', 'in', 'out', 'tok'] as const;
const zero = (): Record<Dimension, number> => ({
  requests: 0,
  inputTokens: 0,
  outputTokens: 0,
  tokens: 0,
});

/**
 * Polls the limiter's snapshot (what `llmq status` shows) while llmq runs: the foreign spend it
 * counts, and the estimate's accuracy (the dashboard's actual / reserved input).
 */
export function watchLimiter(redis: RedisClient, names: QueueNames, everyMs = 100) {
  const limiter = new Limiter({ redis, names });
  const sum = zero();
  const max = zero();
  const certainMax = zero();
  const possibleMax = zero();
  const extKey = limiter.allKeys.find((k) => k.endsWith(':ext'));
  let samples = 0;
  let at50: LimiterSnapshot['counters'] | undefined;
  let last: LimiterSnapshot['counters'] | undefined;
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const snap = await limiter.snapshot().catch(() => undefined);
      const ext = extKey ? await redis.hgetall(extKey).catch(() => ({})) : {};
      if (snap) {
        const live = (f: string) =>
          Number((ext as Record<string, string>)[`${f}|until`] ?? 0) > snap.now
            ? Number((ext as Record<string, string>)[f] ?? 0)
            : 0;
        DIMS.forEach((d, i) => {
          const f = `global|${LUA_DIMS[i]}`;
          certainMax[d] = Math.max(certainMax[d], live(f), live(`${f}|next`));
          possibleMax[d] = Math.max(possibleMax[d], live(`${f}|last`));
        });
        const global = snap.scopes.find((s) => s.scope === 'global');
        for (const d of DIMS) {
          const f = global?.dimensions[d].foreign ?? 0;
          sum[d] += f;
          max[d] = Math.max(max[d], f);
        }
        samples++;
        last = snap.counters;
        if (!at50 && snap.counters.settled >= 50) at50 = snap.counters;
      }
      await new Promise((r) => setTimeout(r, everyMs));
    }
  })();
  return {
    async stop(): Promise<LimiterWatchReport> {
      stopped = true;
      await loop;
      const ratio = (a: number, b: number) => (b > 0 ? a / b : Number.NaN);
      const from = at50 ?? last;
      return {
        samples,
        foreignMean: Object.fromEntries(
          DIMS.map((d) => [d, sum[d] / Math.max(1, samples)]),
        ) as Record<Dimension, number>,
        foreignMax: max,
        certainMax,
        possibleMax,
        accuracy: ratio(last?.actualIn ?? 0, last?.settledReservedIn ?? 0),
        accuracyAfter50: ratio(
          (last?.actualIn ?? 0) - (from?.actualIn ?? 0),
          (last?.settledReservedIn ?? 0) - (from?.settledReservedIn ?? 0),
        ),
        settled: last?.settled ?? 0,
      };
    },
  };
}
