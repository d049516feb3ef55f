import type { QueueNames } from '../../shared/keys.ts';
import { Limiter } from '../../shared/limiter/limiter.ts';
import type { Dimension, LimiterSnapshot } from '../../shared/limiter/types.ts';
import type { RedisClient } from '../../shared/redis.ts';

/** What the limiter said while a run lasted, sampled every `everyMs`. */
export interface LimiterWatchReport {
  readonly samples: number;
  /**
   * The global scope's spend that the provider's projected view holds beyond ours (another
   * client's, or rounding; alone on the key, a phantom): the provider's limit less our window
   * less its room, per dimension, mean and largest over the samples.
   */
  readonly foreignMean: Readonly<Record<Dimension, number>>;
  readonly foreignMax: Readonly<Record<Dimension, number>>;
  /** Actual over reserved input of the settled calls, all of them and after the first 50. */
  readonly accuracy: number;
  readonly accuracyAfter50: number;
  readonly settled: number;
}

const DIMS: readonly Dimension[] = ['requests', 'inputTokens', 'outputTokens', 'tokens'];
const zero = (): Record<Dimension, number> => ({
  requests: 0,
  inputTokens: 0,
  outputTokens: 0,
  tokens: 0,
});

/**
 * Polls the limiter's snapshot (what `llmq status` shows) while llmq runs: the spend beyond ours
 * its provider view holds, and the estimate's accuracy (the dashboard's actual / reserved input).
 */
export function watchLimiter(redis: RedisClient, names: QueueNames, everyMs = 100) {
  const limiter = new Limiter({ redis, names });
  const sum = zero();
  const max = zero();
  let samples = 0;
  let at50: LimiterSnapshot['counters'] | undefined;
  let last: LimiterSnapshot['counters'] | undefined;
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const snap = await limiter.snapshot().catch(() => undefined);
      if (snap) {
        const global = snap.scopes.find((s) => s.scope === 'global');
        for (const d of DIMS) {
          const u = global?.dimensions[d];
          const f =
            u?.providerLimit !== undefined && u.providerRoom !== undefined
              ? Math.max(0, u.providerLimit - u.used - u.providerRoom)
              : 0;
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
