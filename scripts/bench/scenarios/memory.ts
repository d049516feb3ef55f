import Anthropic from '@anthropic-ai/sdk';
import { hashApiKey } from '../../../producer/http/api-keys.ts';
import { startHttpApi } from '../../../producer/http/server.ts';
import { Producer } from '../../../producer/producer.ts';
import { resolveConfig } from '../../../shared/config.ts';
import type { QueueNames } from '../../../shared/keys.ts';
import { bullPrefix } from '../../../shared/keys.ts';
import { limiterKeys } from '../../../shared/limiter/limiter-keys.ts';
import { startPrivateRedis } from '../../../shared/private-redis.ts';
import { connectRedis, duplicateRedis, type RedisClient } from '../../../shared/redis.ts';
import type { MessagesRequest } from '../../../shared/request.ts';
import { storedResultJson } from '../../../shared/result-codec.ts';
import { base64, makePdf } from '../../../testing/media.ts';
import { startMockAnthropic } from '../../../testing/mock-anthropic/index.ts';
import { createProviderClient } from '../../../worker/provider.ts';
import { startWorker, type WorkerHandle } from '../../../worker/worker.ts';
import { until } from '../redis-servers.ts';
import type { ScenarioContext, ScenarioResult } from '../report.ts';
import { count, ratio } from '../table.ts';

const KEY = 'sk-bench-memory-0123456789';
const MB = 1024 * 1024;
/** Binary a PDF carries besides its text (see pdfRequest). */
const EMBEDDED_BYTES = 17_000;
/** The workers' limiter window. */
const WINDOW_MS = 10_000;

/** What a key of the queue is: a job's hash, a job's log lines, the event stream, the rest. */
function kindOf(key: string): string {
  if (key.endsWith(':events')) return 'events';
  if (key.endsWith(':logs')) return 'job logs';
  if (/:[0-9a-f-]{36}$/.test(key)) return 'jobs';
  return 'other';
}

/** Bytes of every key under the queue's prefix (MEMORY USAGE, every sample), by kind. */
async function queueBytesByKind(redis: RedisClient, names: QueueNames) {
  const kinds: Record<string, number> = {};
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${names.prefix}:*`, 'COUNT', 1000);
    cursor = next;
    const sizes = await Promise.all(keys.map((k) => redis.memory('USAGE', k, 'SAMPLES', 0)));
    keys.forEach((k, i) => {
      kinds[kindOf(k)] = (kinds[kindOf(k)] ?? 0) + Number(sizes[i] ?? 0);
    });
  } while (cursor !== '0');
  return kinds;
}

/** Bytes of every key under the queue's prefix. */
async function queueBytes(redis: RedisClient, names: QueueNames): Promise<number> {
  return Object.values(await queueBytesByKind(redis, names)).reduce((a, b) => a + b, 0);
}

const usedMemory = async (redis: RedisClient) =>
  Number(/^used_memory:(\d+)/m.exec(await redis.info('memory'))?.[1] ?? Number.NaN);

/**
 * A PDF of 30 pages of text to summarize, its own for each `i`: 80 KB a request, as the issue's
 * 150 real PDFs (~12 MB). Its 17 KB of binary stand for what a real PDF embeds (fonts,
 * images): pdf-lib's standard font embeds nothing.
 */
async function pdfRequest(i: number): Promise<MessagesRequest> {
  const pdf = await makePdf(30, 50, i, EMBEDDED_BYTES);
  return {
    model: 'claude-test-1',
    max_tokens: 200,
    messages: [
      {
        role: 'user',
        content: [
          {
            type: 'document',
            source: { type: 'base64', media_type: 'application/pdf', data: base64(pdf) },
          },
          { type: 'text', text: 'Summarize this document in three sentences.' },
        ],
      },
    ],
  } as MessagesRequest;
}

/** Where bench workers serve: a queue, against a mock. */
interface WorkersOn {
  readonly names: QueueNames;
  readonly baseURL: string;
}

/** Long answers (4,000 tokens each): their results' bytes as JSON and as Redis keeps them. */
async function longAnswers(redis: RedisClient, workers: (on: WorkersOn) => Promise<void>) {
  const names: QueueNames = { prefix: 'bench-memory-answers', queue: 'answers' };
  const mock = await startMockAnthropic({ latencyMs: 5, outputShare: 1 });
  const producer = new Producer({ redis, names });
  try {
    const ids = await producer.enqueueMany(
      Array.from({ length: 20 }, (_, i) => ({
        model: 'claude-test-1',
        max_tokens: 4_000,
        messages: [{ role: 'user' as const, content: `Write at length, part ${i}.` }],
      })),
    );
    await workers({ names, baseURL: mock.url });
    const results = await Promise.all(ids.map((id) => producer.waitForResult(id)));
    const json = results.reduce((n, r) => n + Buffer.byteLength(JSON.stringify(r)), 0);
    const keys = ids.map((id) => `${bullPrefix(names)}:${names.queue}:${id}`);
    const lengths = await Promise.all(keys.map((k) => redis.hstrlen(k, 'returnvalue')));
    const stored = lengths.reduce((n, l) => n + l, 0);
    const started = performance.now();
    for (const r of results) storedResultJson(JSON.stringify(r));
    const deflateMs = (performance.now() - started) / results.length;
    return { answers: results.length, json, stored, deflateMs };
  } finally {
    await producer.close();
    await mock.close();
  }
}

/**
 * Memory: what Redis holds per job during and after a document run (the queue's keys by
 * MEMORY USAGE), and Redis's memory before, during and after a 20 MB request through the
 * gateway. On a Redis of its own, so that nothing else moves its figures.
 */
export async function memoryScenario(ctx: ScenarioContext): Promise<ScenarioResult> {
  const server = await startPrivateRedis();
  const redis = connectRedis(server.url);
  const mock = await startMockAnthropic({ latencyMs: 20 });
  const names: QueueNames = { prefix: 'bench-memory', queue: 'docs' };
  const workers: WorkerHandle[] = [];
  const conns: RedisClient[] = [];
  try {
    const startWorkers = async (n: number, on: WorkersOn = { names, baseURL: mock.url }) => {
      for (let i = 0; i < n; i++) {
        const conn = duplicateRedis(redis);
        conns.push(conn);
        workers.push(
          await startWorker({
            redis: conn,
            names: on.names,
            client: createProviderClient({ apiKey: KEY, baseURL: on.baseURL }),
            limiter: { limits: { tokens: 100_000_000 }, windowMs: WINDOW_MS },
            concurrency: 10,
          }),
        );
      }
    };
    // A document run: every PDF enqueued, then two workers.
    const calls = ctx.smoke ? 10 : ctx.quick ? 40 : 150;
    ctx.log(`memory: ${calls} PDFs of 30 pages`);
    const requests = await Promise.all(Array.from({ length: calls }, (_, i) => pdfRequest(i)));
    const requestBytes = requests.reduce((n, r) => n + Buffer.byteLength(JSON.stringify(r)), 0);
    const producer = new Producer({ redis, names });
    const ids = await producer.enqueueMany(requests);
    const waiting = await queueBytes(redis, names);
    let during = 0;
    await startWorkers(2);
    await until(
      async () => {
        during = Math.max(during, await queueBytes(redis, names));
        const states = await Promise.all(ids.map((id) => producer.queue.getJobState(id)));
        return states.every((s) => s === 'completed');
      },
      600_000,
      200,
    );
    const atOnce = await queueBytes(redis, names);
    // What stays: the limiter's log of the window's calls expires a window after the last.
    const log = limiterKeys(names).log;
    await until(async () => (await redis.exists(log)) === 0, 2 * WINDOW_MS + 5_000, 200);
    const kinds = await queueBytesByKind(redis, names);
    const after = Object.values(kinds).reduce((a, b) => a + b, 0);
    await producer.close();
    const answers = await longAnswers(redis, (on) => startWorkers(1, on));

    // A 20 MB request through the gateway, answered.
    const api = await startHttpApi({
      config: resolveConfig({
        flags: {
          queue: names.queue,
          prefix: names.prefix,
          redisUrl: server.url,
          maxDepthBytes: '64mb',
        },
        env: { ANTHROPIC_API_KEY: KEY, ANTHROPIC_BASE_URL: mock.url },
      }),
      apiKeys: `bench:${hashApiKey(KEY)}`,
      port: 0,
    });
    const sdk = new Anthropic({ apiKey: KEY, baseURL: api.url, maxRetries: 0 });
    const small = {
      model: 'claude-test-1',
      max_tokens: 20,
      messages: [{ role: 'user' as const, content: 'warm up' }],
    };
    await sdk.messages.create(small);
    const before = await usedMemory(redis);
    let peak = before;
    let answered = false;
    const big = {
      ...small,
      messages: [{ role: 'user' as const, content: 'lorem ipsum '.repeat((20 * MB) / 12) }],
    };
    const call = sdk.messages.create(big).finally(() => {
      answered = true;
    });
    while (!answered) {
      peak = Math.max(peak, await usedMemory(redis));
      await new Promise((r) => setTimeout(r, 20));
    }
    await call;
    const once = await usedMemory(redis);
    await api.close();

    const share = after / requestBytes;
    const gatewayRise = once - before;
    const row = (phase: string, bytes: number) => [
      phase,
      count(bytes),
      count(Math.round(bytes / calls)),
      ratio(bytes / requestBytes),
    ];
    return {
      name: 'memory',
      title: `what Redis holds: ${calls} PDFs of 30 pages (${count(requestBytes)} bytes of requests), two workers; a 20 MB request through the gateway`,
      settings: { calls, requestBytes },
      headers: ['phase', 'queue keys, bytes', 'per job', '/ requests'],
      rows: [
        row('all waiting', waiting),
        row('during the run (most)', during),
        row('all completed, at once', atOnce),
        row('all completed, a window later (what stays)', after),
        [
          `${answers.answers} long answers (4,000 tokens): results as JSON / as kept`,
          `${count(answers.json)} / ${count(answers.stored)}`,
          count(Math.round(answers.stored / answers.answers)),
          ratio(answers.stored / answers.json),
        ],
        ['gateway: before the 20 MB request', count(before), '', ''],
        ['gateway: while it ran (most)', count(peak), '', ''],
        ['gateway: once answered', count(once), '', ''],
      ],
      figures: [
        { requestBytes, waiting, during, atOnce, after, kinds, answers, before, peak, once },
      ],
      targets: [
        {
          name: 'after the run (what stays), the queue holds at most 5 % of its requests',
          met: share <= 0.05,
          detail: `${count(after)} of ${count(requestBytes)} (${(share * 100).toFixed(1)} %)`,
        },
        {
          name: 'a 20 MB gateway request: Redis within 5 MB of before, once answered',
          met: gatewayRise <= 5 * MB,
          detail: `${(gatewayRise / MB).toFixed(1)} MB more than before`,
        },
      ],
      notes: [
        `what stays, by kind: ${Object.entries(kinds)
          .map(([k, b]) => `${k} ${count(b)} (${count(Math.round(b / calls))} a job)`)
          .join(', ')}`,
        'queue keys: MEMORY USAGE of every key under the queue prefix (jobs, limiter, metrics, history, events) on a Redis of its own',
        'gateway: INFO used_memory of that Redis, polled every 20 ms while the request ran',
        `long answers: deflated from 8 KB when that saves a quarter (shared/result-codec.ts), ${answers.deflateMs.toFixed(2)} ms a result to deflate`,
      ],
    };
  } finally {
    await Promise.all(workers.map((w) => w.stop(0).catch(() => {})));
    for (const c of conns) c.disconnect();
    await mock.close();
    redis.disconnect();
    await server.stop();
  }
}
