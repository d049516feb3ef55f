import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Producer } from '../producer/producer.ts';
import { resolveConfig } from '../shared/config.ts';
import { RedisUnavailableError } from '../shared/errors.ts';
import type { JobResult } from '../shared/job.ts';
import { queueRegistryKey } from '../shared/keys.ts';
import {
  type PrivateRedis,
  redisServerInstalled,
  startPrivateRedis,
} from '../shared/private-redis.ts';
import { assertRedis, connectRedis, deleteKeysMatching } from '../shared/redis.ts';
import { type MockAnthropicHandle, startMockAnthropic } from '../testing/mock-anthropic/index.ts';
import { createProviderClient } from '../worker/provider.ts';
import { startWorker } from '../worker/worker.ts';

const SAMPLES = new URL('./samples', import.meta.url).pathname;

export interface DemoReport {
  readonly documents: number;
  readonly summarized: number;
  readonly dead: number;
  readonly provider429s: number | null;
  readonly inputTokens: number;
  readonly outputTokens: number;
  readonly seconds: number;
  readonly provider: 'mock' | 'anthropic';
  readonly redis: 'REDIS_URL' | 'private';
  readonly summaries: readonly { file: string; firstLine: string }[];
}

/**
 * The demo's last lines: the first line of each summary it made (placeholder text from the mock),
 * then what to try next, written as `llmq` is run here (`command`).
 */
function closingLines(report: DemoReport, command: string): string[] {
  const source =
    report.provider === 'mock'
      ? 'the mock writes placeholder text; with ANTHROPIC_API_KEY set, Claude writes them'
      : 'written by Claude';
  const next: [string, string][] = [
    ['status', 'jobs per state, the budget in use, pauses and breakers (--queue NAME)'],
    ['dashboard', 'the overview, the live budget and Bull Board, in a browser'],
    ['serve', 'the HTTP job API and the drop-in Messages API (set LLMQ_API_KEYS)'],
  ];
  const width = Math.max(...next.map(([c]) => `${command} ${c}`.length));
  return [
    `first lines of the summaries (${source}):`,
    ...report.summaries.map((s) => `  ${s.file}: ${s.firstLine}`),
    'try next:',
    ...next.map(([c, what]) => `  ${`${command} ${c}`.padEnd(width)}  ${what}`),
  ];
}

/**
 * Summarizes the bundled sample documents through the real path: enqueue → gated worker →
 * provider (the mock when no ANTHROPIC_API_KEY is set) → stored result. `command` is how the
 * person runs llmq (`node scripts/llmq.mjs`, `npx llmq`), for the next steps it suggests.
 */
export async function runDemo(
  env: Record<string, string | undefined> = process.env,
  out: (line: string) => void = console.log,
  command = 'llmq',
): Promise<DemoReport> {
  const config = resolveConfig({ env });
  let privateRedis: PrivateRedis | undefined;
  let redisUrl = config.redisUrl;
  try {
    await assertRedis(redisUrl);
  } catch (err) {
    if (!(err instanceof RedisUnavailableError) || !redisServerInstalled()) throw err;
    privateRedis = await startPrivateRedis();
    redisUrl = privateRedis.url;
    out(`(nothing answered at ${err.url}: started a private redis-server at ${redisUrl})`);
  }
  let mock: MockAnthropicHandle | undefined;
  if (!config.anthropicApiKey) {
    mock = await startMockAnthropic({
      windowMs: 10_000,
      limits: { tokens: 8_000 },
      latencyMs: 150,
      latencyPerOutputTokenMs: 2,
    });
    out(
      `(no ANTHROPIC_API_KEY: using the mock Anthropic server at ${mock.url}, 8,000 tokens per 10 s)`,
    );
  }
  const names = { prefix: 'llmq-demo', queue: `demo-${randomBytes(3).toString('hex')}` };
  const redis = connectRedis(redisUrl);
  const limits = mock
    ? { tokens: 8_000 }
    : {
        tokens: config.tpm,
        inputTokens: config.itpm,
        outputTokens: config.otpm,
        requests: config.rpm,
      };
  const producer = new Producer({ redis, names, limits });
  const worker = await startWorker({
    redis,
    names,
    client: createProviderClient({
      apiKey: config.anthropicApiKey ?? 'mock-key',
      baseURL: mock ? mock.url : config.anthropicBaseUrl,
    }),
    limiter: {
      windowMs: mock ? 10_000 : config.windowS * 1000,
      limits,
      outputAccounting: config.outputAccounting,
    },
    concurrency: 4,
    maxInFlight: 4,
  });
  const started = performance.now();
  try {
    const files = (readdirSync(SAMPLES, { recursive: true }) as string[])
      .filter((f) => /\.(md|txt)$/.test(f))
      .sort();
    const ids = new Map<string, string>();
    for (const f of files) {
      const text = readFileSync(join(SAMPLES, f), 'utf8');
      const id = await producer.enqueue(
        {
          model: 'claude-haiku-4-5',
          max_tokens: 300,
          messages: [
            { role: 'user', content: `Summarize this document in two sentences.\n\n${text}` },
          ],
        },
        { priority: 'batch' },
      );
      ids.set(f, id);
    }
    out(
      `enqueued ${files.length} documents on queue ${names.queue}; the worker is summarizing them…`,
    );
    const deadline = Date.now() + 180_000;
    let results: { file: string; result?: JobResult; failed?: string }[] = [];
    for (;;) {
      results = await Promise.all(
        [...ids].map(async ([file, id]) => {
          const job = await producer.queue.getJob(id);
          if (!job) return { file, failed: 'job vanished' };
          if (job.returnvalue) return { file, result: job.returnvalue };
          if (job.finishedOn && job.failedReason) return { file, failed: job.failedReason };
          return { file };
        }),
      );
      if (results.every((r) => r.result || r.failed)) break;
      if (Date.now() > deadline) throw new Error('the demo did not finish within 3 minutes');
      await sleep(200);
    }
    const summaries = results.map((r) => {
      const text = r.result?.message.content
        .map((b) => (b.type === 'text' ? b.text : ''))
        .join('')
        .trim();
      return {
        file: basename(r.file),
        firstLine: r.failed
          ? `(dead-lettered: ${r.failed})`
          : (text?.split('\n')[0] ?? '').slice(0, 100),
      };
    });
    const ok = results.filter((r) => r.result);
    const report: DemoReport = {
      documents: files.length,
      summarized: ok.length,
      dead: results.length - ok.length,
      provider429s: mock ? (mock.stats().responses['429'] ?? 0) : null,
      inputTokens: ok.reduce((n, r) => n + (r.result?.message.usage.input_tokens ?? 0), 0),
      outputTokens: ok.reduce((n, r) => n + (r.result?.message.usage.output_tokens ?? 0), 0),
      seconds: (performance.now() - started) / 1000,
      provider: mock ? 'mock' : 'anthropic',
      redis: privateRedis ? 'private' : 'REDIS_URL',
      summaries,
    };
    out(
      `demo: ${report.summarized}/${report.documents} summarized, ${report.dead} dead-lettered, ` +
        `${report.provider429s ?? 'n/a'} provider 429s, ${report.inputTokens} input + ${report.outputTokens} output tokens ` +
        `in ${report.seconds.toFixed(1)} s (${report.provider} provider)`,
    );
    for (const line of closingLines(report, command)) out(line);
    return report;
  } finally {
    await worker.stop(5_000);
    await producer.close();
    await deleteKeysMatching(redis, `${names.prefix}:{${names.queue}}:*`).catch(() => {});
    await redis.srem(queueRegistryKey(names.prefix), names.queue).catch(() => {});
    await redis.quit().catch(() => redis.disconnect());
    await mock?.close();
    await privateRedis?.stop();
  }
}
