import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import { runBatchSummarize } from '../../../producer/batch/summarize.ts';
import { Producer } from '../../../producer/producer.ts';
import { resolveConfig } from '../../../shared/config.ts';
import { fleetLimitsOf, writeFleetLimits } from '../../../shared/fleet-limits.ts';
import type { QueueNames } from '../../../shared/keys.ts';
import type { RedisClient } from '../../../shared/redis.ts';
import { makePdf } from '../../../testing/media.ts';
import type { MockAnthropicOptions, MockStats } from '../../../testing/mock-anthropic/index.ts';
import { createProviderClient } from '../../../worker/provider.ts';
import { startWorker } from '../../../worker/worker.ts';
import { withMock } from '../mock.ts';
import { benchRedis, withBenchScope } from '../redis-scope.ts';
import type { ScenarioContext, ScenarioResult } from '../report.ts';
import { roundingFor } from '../shapes.ts';
import { count, ratio, seconds } from '../table.ts';
import { latencyFor, prng, windowMsFor } from '../workload.ts';

const INPUT_LIMIT = 40_000;
const OUTPUT_LIMIT = 8_000;
const MAX_TOKENS = 512;
const CONCURRENCY = 4;
const MODEL = 'claude-haiku-4-5';

/** One run of `batch summarize` over the folder, against the bucket. */
interface LongRun {
  readonly client: string;
  readonly summarized: number;
  readonly refused: number;
  readonly dead: number;
  /** Calls of each file (1, or its parts and the combine call), by file name. */
  readonly calls: Readonly<Record<string, number>>;
  readonly stats: MockStats;
  readonly spanMs: number;
  readonly boundMs: number;
  readonly wallMs: number;
}

/**
 * The folder: 4 PDFs of 40–90 pages (10 to 50 lines of text a page), 2 short PDFs and
 * 2 Markdown files (one of 200 KB, longer than a call holds), the same every run.
 */
async function writeFolder(dir: string, quick: boolean): Promise<string[]> {
  const rng = prng(47);
  const long = quick ? [40, 52, 66, 90] : [42, 58, 73, 90];
  const files: [string, Uint8Array | string][] = [];
  for (const [i, pages] of long.entries())
    files.push([`report-${i + 1}.pdf`, await makePdf(pages, 10 + Math.floor(rng() * 41), 100 + i)]);
  files.push(['memo-1.pdf', await makePdf(3, 40, 201)], ['memo-2.pdf', await makePdf(6, 25, 202)]);
  const paragraph = (i: number) =>
    `Section ${i}. The fleet drained ${(i * 37) % 500} jobs in window ${i}; ${(i * 11) % 7} were retried and none was lost. `.repeat(
      4,
    );
  files.push(['notes.md', `# Notes\n\n${paragraph(1)}\n`]);
  files.push(['handbook.md', Array.from({ length: 460 }, (_, i) => paragraph(i)).join('\n\n')]);
  for (const [name, content] of files) writeFileSync(join(dir, name), content);
  return files.map(([name]) => name);
}

/** The least span a token bucket allows for what the mock charged, in each dimension. */
function bucketMinimumMs(stats: MockStats, windowMs: number): number {
  const over = (spent: number, limit: number) => ((spent - limit) / limit) * windowMs;
  return Math.max(
    0,
    over(stats.spent.input_tokens, INPUT_LIMIT),
    over(stats.spent.output_tokens, OUTPUT_LIMIT),
  );
}

/**
 * One run: a worker in this process (its limits configured, or none: read from the headers),
 * then `batch summarize` over the folder with a producer that counts with the mock's
 * count_tokens, no flag beyond the defaults.
 */
async function runOnce(
  ctx: ScenarioContext,
  mockOptions: MockAnthropicOptions,
  dir: string,
  configured: boolean,
): Promise<LongRun> {
  const windowMs = mockOptions.windowMs!;
  const client = configured ? 'llmq, limits configured' : 'llmq, limits read from the headers';
  ctx.log(`documents-long: ${client}`);
  return withMock(mockOptions, (mock) =>
    withBenchScope(ctx.redisUrl, 'documents-long', async (redis, names) => {
      const limits = configured ? { inputTokens: INPUT_LIMIT, outputTokens: OUTPUT_LIMIT } : {};
      if (configured) await storeFleetLimits(redis, names, windowMs);
      const conn = benchRedis(ctx.redisUrl);
      const worker = await startWorker({
        redis: conn,
        names,
        client: createProviderClient({ apiKey: 'bench-key', baseURL: mock.url }),
        limiter: { windowMs, limits },
        concurrency: CONCURRENCY,
      });
      const producer = new Producer({
        redis,
        names,
        tokenCounter: new Anthropic({ apiKey: 'bench-key', baseURL: mock.url, maxRetries: 0 }),
      });
      const calls: Record<string, number> = {};
      try {
        const t0 = Date.now();
        const report = await runBatchSummarize({
          paths: [dir],
          out: join(dir, `results-${configured ? 'configured' : 'read'}.jsonl`),
          producer,
          model: MODEL,
          maxTokens: MAX_TOKENS,
          progress: { write: () => true },
          report: { write: () => true },
          onLine: (l) => {
            calls[l.file.slice(dir.length + 1)] = 'parts' in l && l.parts ? l.parts + 1 : 1;
          },
        });
        const wallMs = Date.now() - t0;
        const stats = await mock.stats();
        return {
          client,
          summarized: report.succeeded,
          refused: report.refused.length,
          dead: report.failed.length,
          calls,
          stats,
          spanMs: (stats.lastAdmissionAt ?? 0) - (stats.firstAdmissionAt ?? 0),
          boundMs: bucketMinimumMs(stats, windowMs),
          wallMs,
        };
      } finally {
        await producer.close();
        await worker.stop(2_000).catch(() => {});
        conn.disconnect();
      }
    }),
  );
}

/** What `llmq worker --itpm 40000 --otpm 8000 --window W` stores for the fleet. */
async function storeFleetLimits(redis: RedisClient, names: QueueNames, windowMs: number) {
  const flags = {
    itpm: String(INPUT_LIMIT),
    otpm: String(OUTPUT_LIMIT),
    window: String(windowMs / 1000),
  };
  const limits = fleetLimitsOf(resolveConfig({ flags, env: {} }));
  await writeFleetLimits(redis, names, limits, 'bench');
}

/**
 * Long documents: a folder of long and short PDFs and Markdown summarized by `batch summarize`
 * against a token bucket of 40,000 input and 8,000 output tokens per window, its readings
 * rounded as the API rounds them: once with the workers' limits configured, once with none
 * (read from the headers).
 */
export async function documentsLongScenario(ctx: ScenarioContext): Promise<ScenarioResult> {
  const windowMs = windowMsFor(ctx.quick);
  const latency = latencyFor(ctx.quick);
  const dir = mkdtempSync(join(tmpdir(), 'llmq-bench-docs-'));
  try {
    const files = await writeFolder(dir, ctx.quick);
    const mock: MockAnthropicOptions = {
      ...ctx.counting,
      windowMs,
      limits: { inputTokens: INPUT_LIMIT, outputTokens: OUTPUT_LIMIT },
      algorithm: 'bucket',
      roundReadings: roundingFor(INPUT_LIMIT),
      outputAccounting: 'reserve',
      latencyMs: latency.baseMs,
      latencyPerOutputTokenMs: latency.perTokenMs,
      outputShare: 0.5,
    };
    const runs = [await runOnce(ctx, mock, dir, true), await runOnce(ctx, mock, dir, false)];
    return report(runs, files, mock);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function report(
  runs: readonly LongRun[],
  files: readonly string[],
  mock: MockAnthropicOptions,
): ScenarioResult {
  const n = files.length;
  const [configured, read] = runs as [LongRun, LongRun];
  const sameCuts = files.every((f) => configured.calls[f] === read.calls[f]);
  return {
    name: 'documents-long',
    title: `${n} files (4 PDFs of 40–90 pages, 2 short PDFs, 2 Markdown), batch summarize, ${count(INPUT_LIMIT)} input + ${count(OUTPUT_LIMIT)} output tokens per ${(mock.windowMs ?? 0) / 1000} s token bucket, readings rounded to ${roundingFor(INPUT_LIMIT)}`,
    settings: { mock: { ...mock }, files, maxTokens: MAX_TOKENS, concurrency: CONCURRENCY },
    headers: [
      'client',
      'summarized',
      'refused',
      '429s',
      'calls (count_tokens)',
      'input charged',
      'admission span',
      'bucket minimum',
      'span / minimum',
      'wall',
    ],
    rows: runs.map((r) => [
      r.client,
      `${r.summarized}/${n}`,
      count(r.refused),
      count(r.stats.responses['429'] ?? 0),
      `${count(r.stats.admitted)} (${count(r.stats.countTokensCalls)})`,
      count(r.stats.spent.input_tokens),
      seconds(r.spanMs),
      seconds(r.boundMs),
      ratio(r.spanMs / r.boundMs),
      seconds(r.wallMs),
    ]),
    figures: runs.map(({ stats, ...r }) => ({
      ...r,
      rateLimited: stats.responses['429'] ?? 0,
      admitted: stats.admitted,
      countTokensCalls: stats.countTokensCalls,
      spent: stats.spent,
    })),
    targets: [
      ...runs.map((r) => ({
        name: `${r.client}: every file summarized, 0 refused, 0 429s`,
        met:
          r.summarized === n &&
          r.refused === 0 &&
          r.dead === 0 &&
          (r.stats.responses['429'] ?? 0) === 0,
        detail: `${r.summarized}/${n}, ${r.refused} refused, ${r.dead} dead, ${r.stats.responses['429'] ?? 0} 429s`,
      })),
      {
        name: `${configured.client}: admission span within 1.2× the bucket's minimum for what was charged`,
        met: configured.spanMs <= 1.2 * configured.boundMs,
        detail: `${seconds(configured.spanMs)} against ${seconds(configured.boundMs)} (${ratio(configured.spanMs / configured.boundMs)})`,
      },
      {
        name: 'limits read from the headers: every file cut as with the limits configured',
        met: sameCuts,
        detail: files.map((f) => `${f} ${configured.calls[f]}/${read.calls[f]}`).join(', '),
      },
    ],
    notes: [
      'calls per file: 1, or its parts and the combine call; count_tokens asked where the guess decides (a cold page-cost learning, a document that does not fit one call), within the fleet’s budget (100 a minute)',
      'bucket minimum: (charged − capacity) / refill rate, input and output (max_tokens reserved), the larger; the mock charges a PDF page 1,500 tokens plus a third of a token per byte of its content',
      'the run with no limit configured sends its smallest file first and plans the rest once the provider’s first answer has brought the limits',
    ],
  };
}
