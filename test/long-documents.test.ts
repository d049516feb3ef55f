import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import type { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  type BatchSummarizeOptions,
  DEFAULT_SUMMARY_PROMPT,
  runBatchSummarize,
} from '../producer/batch/summarize.ts';
import { COMBINE_PROMPT, planDocument } from '../producer/documents/long-document.ts';
import { Producer } from '../producer/producer.ts';
import { answerText } from '../shared/combine.ts';
import { resolveConfig } from '../shared/config.ts';
import { estimateCost, estimateTextTokens } from '../shared/estimate.ts';
import { fleetLimitsOf, writeFleetLimits } from '../shared/fleet-limits.ts';
import type { JobResult } from '../shared/job.ts';
import type { QueueNames } from '../shared/keys.ts';
import type { MessagesRequest } from '../shared/request.ts';
import { type MockAnthropicHandle, startMockAnthropic } from '../testing/mock-anthropic/index.ts';
import { startBatchSubmitter } from '../worker/batches/submitter.ts';
import { callProvider, createProviderClient } from '../worker/provider.ts';
import { startWorker, type WorkerHandle, type WorkerOptions } from '../worker/worker.ts';
import { batchCli } from './fixtures/batch-cli.ts';
import { watchedProvider } from './fixtures/document-run.ts';
import { deleteKeys, newRedis, REDIS_URL, testNames, until } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
let dir: string;
let mock: MockAnthropicHandle;
const closers: (() => Promise<unknown>)[] = [];

beforeEach(async () => {
  redis = newRedis();
  names = testNames('longdoc');
  dir = mkdtempSync(join(tmpdir(), 'llmq-longdoc-'));
  mock = await startMockAnthropic({ latencyMs: 5 });
});
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
  await mock.close();
  await deleteKeys(redis, names.prefix);
  redis.disconnect();
  rmSync(dir, { recursive: true, force: true });
});

const MAX_TOKENS = 64;
const CHUNK_TOKENS = 20_000;

/** A document of about `tokens` estimated tokens: paragraphs of numbered sentences. */
function writeDocument(tokens: number): { path: string; text: string } {
  const paragraphs: string[] = [];
  let bytes = 0;
  for (let p = 0; bytes < tokens * 3; p++) {
    const sentences = Array.from(
      { length: 4 + (p % 5) },
      (_, s) => `In section ${p}, finding ${s} reports a figure of ${(p * 31 + s * 7) % 1000}.`,
    );
    const para = sentences.join(' ');
    paragraphs.push(para);
    bytes += Buffer.byteLength(para) + 2;
  }
  const text = paragraphs.join('\n\n');
  const path = join(dir, 'report.txt');
  writeFileSync(path, text);
  return { path, text };
}

/** llmq's worker against the mock, through the real SDK; `seen` records each request sent. */
async function worker(
  seen: MessagesRequest[] = [],
  hold?: (r: MessagesRequest) => boolean,
  limiter: WorkerOptions['limiter'] = {},
): Promise<WorkerHandle> {
  const provider = watchedProvider(mock.url, seen, hold);
  const conn = newRedis();
  const w = await startWorker({ redis: conn, names, provider, limiter, concurrency: 4 });
  closers.push(async () => {
    await w.stop(200).catch(() => {});
    conn.disconnect();
  });
  return w;
}

/** The parts the summarize run splits `text` into. */
const partsOf = (text: string) =>
  planDocument(text, {
    model: 'claude-haiku-4-5',
    maxTokens: MAX_TOKENS,
    prompt: DEFAULT_SUMMARY_PROMPT,
    chunkTokens: CHUNK_TOKENS,
  }).parts;

/** Runs `batch summarize` on one file in this process, parts of CHUNK_TOKENS. */
async function summarize(path: string, extra: Partial<BatchSummarizeOptions> = {}) {
  const producer = new Producer({ redis, names });
  closers.push(() => producer.close());
  const out = join(dir, 'results.jsonl');
  const r = await runBatchSummarize({
    paths: [path],
    out,
    producer,
    maxTokens: MAX_TOKENS,
    chunkTokens: CHUNK_TOKENS,
    progress: { write: () => true },
    report: { write: () => true },
    ...extra,
  });
  return { r, out, producer };
}

const isCombine = (r: MessagesRequest) => r.system === COMBINE_PROMPT;
const userText = (r: MessagesRequest) => String(r.messages.at(-1)!.content);

interface Line {
  id: string;
  summary?: string;
  error?: string;
  parts?: number;
  usage?: { input_tokens: number; output_tokens: number };
}
const readLines = (path: string) =>
  readFileSync(path, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Line);

describe('long documents: summarized in parts, then combined, as a BullMQ flow', () => {
  it('a 150,000-token document with --chunk-tokens 20000: one call per part, then one built from their summaries', async () => {
    const { path, text } = writeDocument(150_000);
    expect(estimateTextTokens(text)).toBeGreaterThanOrEqual(150_000);
    const n = partsOf(text).length;
    expect(n).toBeGreaterThanOrEqual(8);
    const seen: MessagesRequest[] = [];
    await worker(seen);
    let reported = '';
    const report = {
      write: (c: string) => {
        reported += c;
        return true;
      },
    };
    const { r, out, producer } = await summarize(path, { report });
    expect(r).toMatchObject({ succeeded: 1, split: 1, enqueued: 1, exitCode: 0 });

    // The provider saw the parts, then the final call: nothing more.
    const stats = mock.stats();
    expect(stats.admitted).toBe(n + 1);
    const parts = seen.filter((q) => !isCombine(q));
    expect(parts).toHaveLength(n);
    for (const q of parts)
      expect(estimateTextTokens(userText(q))).toBeLessThanOrEqual(CHUNK_TOKENS);
    expect(seen.at(-1)!.system).toBe(COMBINE_PROMPT);

    // The final call holds every part's summary, in order.
    const [line] = readLines(out);
    const flow = await producer.queue.getJob(line!.id);
    const answers = Object.values((await flow!.getChildrenValues<JobResult>()) ?? {});
    expect(answers).toHaveLength(n);
    const combined = userText(seen.at(-1)!);
    for (const a of answers) expect(combined).toContain(answerText(a));
    expect(combined.indexOf('<part n="1">')).toBeLessThan(combined.indexOf(`<part n="${n}">`));

    // The line: the final summary, how many parts, the usage of every call.
    expect(line).toMatchObject({ parts: n, summary: answerText(flow!.returnvalue) });
    const outputs = [...answers, flow!.returnvalue].map((a) => a.message.usage.output_tokens);
    expect(line!.usage).toEqual({
      input_tokens: stats.spent.input_tokens,
      output_tokens: outputs.reduce((x, y) => x + y, 0),
    });
    expect(reported).toMatch(/1 summarized in parts/);
  }, 120_000);

  it("a document longer than the fleet's limits allow one call is summarized in parts that fit them", async () => {
    // The workers' limits, stored: 3,000 tokens a second. The run is given no limit of its own.
    const limits = fleetLimitsOf(resolveConfig({ flags: { tpm: '3000', window: '1' }, env: {} }));
    await writeFleetLimits(redis, names, limits, 'test');
    const { path } = writeDocument(9_000);
    const seen: MessagesRequest[] = [];
    await worker(seen, undefined, { limits: { tokens: 3_000 }, windowMs: 1_000 });
    const { r, out } = await summarize(path, { chunkTokens: undefined });
    expect(r).toMatchObject({ succeeded: 1, split: 1, failed: [], exitCode: 0 });
    const [line] = readLines(out);
    expect(line!.parts).toBeGreaterThanOrEqual(3);
    // Every call fit under the limit less its headroom, the final one too.
    expect(seen).toHaveLength(line!.parts! + 1);
    for (const q of seen) {
      const cost = estimateCost(q);
      expect(cost.inputTokens + cost.outputTokens).toBeLessThanOrEqual(
        3_000 * (1 - limits.headroom),
      );
    }
    expect(mock.stats().admitted).toBe(line!.parts! + 1);
  }, 60_000);

  it('a rerun after a kill between the parts and the final call makes only the final call', async () => {
    const { path, text } = writeDocument(60_000);
    const n = partsOf(text).length;
    expect(n).toBeGreaterThan(1);
    const out = join(dir, 'results.jsonl');
    const args = [
      'batch',
      'summarize',
      path,
      '--out',
      out,
      '--max-tokens',
      String(MAX_TOKENS),
      '--chunk-tokens',
      String(CHUNK_TOKENS),
    ];
    // The worker runs the parts; the final call is held back until the command was killed.
    const seen: MessagesRequest[] = [];
    let held = false;
    const first = await worker(seen, (q) => (held ||= isCombine(q)));
    const killed = cli(args);
    await until(() => held && mock.stats().admitted === n, 90_000, 50);
    killed.child.kill('SIGKILL');
    await killed.exit;
    await first.stop(200);
    expect(seen.filter(isCombine)).toHaveLength(0);
    expect(() => readLines(out)).not.toThrow();
    expect(readLines(out)).toHaveLength(0);

    await worker();
    const rerun = cli(args);
    expect(await rerun.exit).toBe(0);
    expect(rerun.out.stdout).toMatch(/0 enqueued, 1 re-attached/);
    expect(mock.stats().admitted).toBe(n + 1);
    const [line] = readLines(out);
    expect(line).toMatchObject({ parts: n, summary: expect.any(String) });
  }, 120_000);

  it('a dead-lettered part: the document line reports it, naming the part', async () => {
    const { path, text } = writeDocument(45_000);
    const n = partsOf(text).length;
    // The provider refuses the second part for good (a 400 through the real SDK).
    const client = createProviderClient({ apiKey: 'sk-test-longdoc', baseURL: mock.url });
    const conn = newRedis();
    const w = await startWorker({
      redis: conn,
      names,
      limiter: {},
      provider: (request, o) =>
        callProvider(
          client,
          userText(request).startsWith(second) ? { ...request, model: 'gpt-unknown' } : request,
          o,
        ),
    });
    closers.push(async () => {
      await w.stop(200);
      conn.disconnect();
    });
    const second = partsOf(text)[1]!.text.slice(0, 200);
    const { r, out } = await summarize(path);
    expect(r.exitCode).toBe(1);
    const [line] = readLines(out);
    expect(line!.error).toMatch(new RegExp(`^part 2 of ${n}: .*gpt-unknown`));
    expect(mock.stats().admitted).toBe(n - 1);
  }, 120_000);

  it('via batches: the parts go by Message Batches, the final call through messages', async () => {
    const { path, text } = writeDocument(45_000);
    const n = partsOf(text).length;
    mock.batches.setOptions({ processingMs: 100 });
    const submitterRedis = newRedis();
    const submitter = startBatchSubmitter({
      redis: submitterRedis,
      names,
      client: new Anthropic({ apiKey: 'sk-test', baseURL: mock.url, maxRetries: 0 }),
      pollMs: 50,
      gatherMs: 100,
      tickMs: 50,
    });
    closers.push(async () => {
      await submitter.stop();
      submitterRedis.disconnect();
    });
    const seen: MessagesRequest[] = [];
    await worker(seen);
    const { r, out } = await summarize(path, { via: 'batches' });
    expect(r).toMatchObject({ succeeded: 1, split: 1, exitCode: 0 });
    expect(r.savedUsd).toBeGreaterThan(0);
    // The parts in one batch; the worker made only the final call.
    expect(mock.batches.stats().created).toBe(1);
    expect(seen).toHaveLength(1);
    expect(seen[0]!.system).toBe(COMBINE_PROMPT);
    expect(readLines(out)[0]).toMatchObject({ parts: n, summary: expect.any(String) });
  }, 120_000);
});

const cli = (args: string[]) =>
  batchCli(args, { REDIS_URL, LLMQ_QUEUE: names.queue, LLMQ_PREFIX: names.prefix });
