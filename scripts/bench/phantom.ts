/**
 * Where the "foreign" spend comes from when no other client exists (issue 21): one llmq worker
 * (concurrency 20) drains the split workload against the mock, alone on the key, while the
 * limiter's foreign spend is sampled; the provider's answers can be held back `lagMs` after
 * their headers arrive (as a loaded event loop would), to show how the phantom grows with the
 * time between the provider's reading and llmq's use of it.
 *
 *   node --import tsx scripts/bench/phantom.ts [accounting=actual|reserve] [lagMs] [counter=differing|tokenizer] [n]
 *
 * Prints one JSON line: settings, wall, foreign mean and max per dimension, 429s.
 */
import Anthropic from '@anthropic-ai/sdk';
import { Producer } from '../../producer/producer.ts';
import { resolveConfig } from '../../shared/config.ts';
import { startWorker } from '../../worker/worker.ts';
import { watchLimiter } from './limiter-watch.ts';
import { withMock } from './mock.ts';
import { CallRecorder } from './recorder.ts';
import { benchRedis, withBenchScope } from './redis-scope.ts';
import { DIFFERING_COUNTER, splitCalls } from './workload.ts';

interface PhantomRunOptions {
  readonly redisUrl: string;
  readonly accounting: 'actual' | 'reserve';
  /** Hold each answer this long after its headers arrived, ms. */
  readonly lagMs: number;
  readonly differing: boolean;
  readonly calls: number;
}

const WINDOW_MS = 2_000;
const LIMITS = { inputTokens: 12_000, outputTokens: 8_000, requests: 120 };

/** One worker alone on the key; the limiter's foreign spend sampled every 100 ms. */
async function runPhantom(o: PhantomRunOptions) {
  const mockOptions = {
    windowMs: WINDOW_MS,
    limits: LIMITS,
    outputAccounting: o.accounting,
    latencyMs: 100,
    latencyPerOutputTokenMs: 0.1,
    outputShare: [0.25, 1] as [number, number],
    ...(o.differing ? DIFFERING_COUNTER : {}),
  };
  return withMock(mockOptions, (mock) =>
    withBenchScope(o.redisUrl, 'phantom', async (redis, names) => {
      const recorder = new CallRecorder({ mode: 'counts' });
      const lagged: typeof fetch = async (input, init) => {
        const response = await recorder.fetch(input as string, init);
        if (o.lagMs > 0) await new Promise((r) => setTimeout(r, o.lagMs));
        return response;
      };
      const limiter = {
        windowMs: WINDOW_MS,
        limits: LIMITS,
        concurrency: 20,
        outputAccounting: o.accounting,
      };
      const connection = benchRedis(o.redisUrl);
      const worker = await startWorker({
        redis: connection,
        names,
        client: new Anthropic({ apiKey: 'k', baseURL: mock.url, maxRetries: 0, fetch: lagged }),
        limiter,
        concurrency: 20,
        stream: 'always',
      });
      const producer = new Producer({ redis, names, limits: LIMITS, headroom: 0.01 });
      const watch = watchLimiter(redis, names, 50);
      const t0 = Date.now();
      const ids = await producer.enqueueMany(splitCalls(o.calls));
      await Promise.all(ids.map((id) => producer.waitForResult(id, { timeout: 300_000 })));
      const wallMs = Date.now() - t0;
      const seen = await watch.stop();
      await worker.stop(5_000);
      await producer.close();
      await connection.quit();
      const calls = await recorder.report();
      return {
        accounting: o.accounting,
        lagMs: o.lagMs,
        counter: o.differing ? 'differing' : 'tokenizer',
        wallMs,
        rateLimited: calls.statuses['429'] ?? 0,
        foreignMean: seen.foreignMean,
        foreignMax: seen.foreignMax,
        certainMax: seen.certainMax,
        possibleMax: seen.possibleMax,
        accuracy: seen.accuracy,
      };
    }),
  );
}

const [accounting = 'actual', lag = '0', counter = 'differing', n = '60'] = process.argv.slice(2);
const { redisUrl } = resolveConfig({ flags: {}, env: process.env });
const result = await runPhantom({
  redisUrl,
  accounting: accounting as 'actual' | 'reserve',
  lagMs: Number(lag),
  differing: counter === 'differing',
  calls: Number(n),
});
process.stdout.write(`${JSON.stringify(result)}\n`);
process.exit(0);
