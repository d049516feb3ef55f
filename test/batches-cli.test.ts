import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import type { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runBatchSummarize } from '../producer/batch/summarize.ts';
import { Producer } from '../producer/producer.ts';
import { batchesKey, type QueueNames } from '../shared/keys.ts';
import { type MockAnthropicHandle, startMockAnthropic } from '../testing/mock-anthropic/index.ts';
import { startBatchSubmitter } from '../worker/batches/submitter.ts';
import { batchCli } from './fixtures/batch-cli.ts';
import { deleteKeys, newRedis, REDIS_URL, testNames, until } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
let dir: string;
let mock: MockAnthropicHandle;

beforeEach(async () => {
  redis = newRedis();
  names = testNames('bcli');
  dir = mkdtempSync(join(tmpdir(), 'llmq-batches-'));
  mock = await startMockAnthropic();
});
afterEach(async () => {
  await mock.close();
  await deleteKeys(redis, names.prefix);
  redis.disconnect();
  rmSync(dir, { recursive: true, force: true });
});

function writeDocs(n: number): string {
  const docs = join(dir, 'docs');
  mkdirSync(docs, { recursive: true });
  for (let i = 0; i < n; i++)
    writeFileSync(
      join(docs, `doc-${String(i).padStart(2, '0')}.txt`),
      `Document ${i}. `.repeat(30),
    );
  return docs;
}

const cli = (args: string[]) =>
  batchCli(args, {
    REDIS_URL,
    LLMQ_QUEUE: names.queue,
    LLMQ_PREFIX: names.prefix,
    ANTHROPIC_API_KEY: 'sk-test-batches',
    ANTHROPIC_BASE_URL: mock.url,
  });

const lines = (path: string) =>
  readFileSync(path, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map(
      (l) => JSON.parse(l) as { file: string; summary?: string; usage?: { output_tokens: number } },
    );

describe('llmq batch summarize --via batches', () => {
  it('runs 30 documents through Message Batches, resumes after a kill without creating a batch twice', async () => {
    const docs = writeDocs(30);
    const out = join(dir, 'results.jsonl');
    mock.batches.setOptions({ processingMs: 4_000 });
    const args = [
      'batch',
      'summarize',
      docs,
      '--out',
      out,
      '--via',
      'batches',
      '--max-tokens',
      '40',
    ];
    const first = cli(args);
    // Killed while the batch is processing, after its id was kept in Redis.
    await until(async () => (await redis.hlen(batchesKey(names, 'inflight'))) > 0, 90_000, 50);
    const created = mock.batches.stats().created;
    expect(created).toBeGreaterThan(0);
    first.child.kill('SIGKILL');
    await first.exit;

    const second = cli(args);
    expect(await second.exit).toBe(0);
    const got = lines(out);
    expect(got).toHaveLength(30);
    for (const l of got) {
      expect(l.summary?.length).toBeGreaterThan(0);
      expect(l.usage?.output_tokens).toBeGreaterThan(0);
    }
    // The same batches were collected: none created again, and no call went through messages.
    expect(mock.batches.stats().created).toBe(created);
    expect(mock.stats().attempts).toBe(0);
    expect(second.out.stdout).toMatch(
      /batch done: 30 file\(s\), 30 summarized.*via batches, saved \$0\.\d{4} \(half price\)/,
    );
    expect(second.out.stderr).toMatch(/batches: .*30 succeeded.*saved \$/);
  }, 180_000);

  it('refuses a malformed --deadline and an unknown --via with one line, enqueueing nothing', async () => {
    const docs = writeDocs(2);
    const out = join(dir, 'r.jsonl');
    for (const [args, message] of [
      [
        ['--via', 'auto', '--deadline', '6 hours'],
        /--deadline must be a duration such as 90m, 6h or 2d .*got "6 hours"/,
      ],
      [['--via', 'fast'], /--via must be messages, batches or auto, got "fast"/],
    ] as const) {
      const run = cli(['batch', 'summarize', docs, '--out', out, ...args]);
      expect(await run.exit).not.toBe(0);
      expect(run.out.stderr.trim().split('\n')).toHaveLength(1);
      expect(run.out.stderr).toMatch(message);
    }
    expect(await redis.keys(`${names.prefix}:*`)).toEqual([]);
    expect(mock.batches.stats().created).toBe(0);
  }, 150_000);
});

describe('errored and expired items in a batch run', () => {
  it('retries the expired items, dead-letters the refused one, and reports it', async () => {
    const docs = writeDocs(6);
    const out = join(dir, 'results.jsonl');
    mock.batches.setOptions({ processingMs: 100 });
    mock.batches.setFaults({
      erroredItems: 1,
      erroredType: 'invalid_request_error',
      expiredBatches: 1,
    });
    const producer = new Producer({ redis, names });
    const progress: string[] = [];
    const submitter = startBatchSubmitter({
      redis: newRedis(),
      names,
      client: new Anthropic({ apiKey: 'sk-test', baseURL: mock.url, maxRetries: 0 }),
      pollMs: 50,
      gatherMs: 200,
      tickMs: 50,
      onProgress: (p) => progress.push(JSON.stringify(p.totals)),
    });
    let report = '';
    try {
      const r = await runBatchSummarize({
        paths: [docs],
        out,
        producer,
        maxTokens: 40,
        via: 'batches',
        progress: { write: () => true },
        report: {
          write: (c) => {
            report += c;
            return true;
          },
        },
      });
      expect(r.succeeded).toBe(5);
      expect(r.failed).toHaveLength(1);
      expect(r.failed[0]?.error).toMatch(/^400 invalid_request_error: mock invalid_request_error/);
      expect(r.exitCode).toBe(1);
      expect(r.savedUsd).toBeGreaterThan(0);
    } finally {
      await submitter.stop();
      await producer.close();
    }
    expect(report).toMatch(/5 summarized, 0 refused, 1 dead-lettered.*via batches, saved/);
    expect(report).toMatch(/dead-lettered: .*doc-\d\d\.txt .*400 invalid_request_error/);
    // One batch expired with 3 items unanswered: they went into a second batch.
    expect(mock.batches.stats().created).toBe(2);
    const last = JSON.parse(progress.at(-1)!) as Record<string, number>;
    expect(last).toMatchObject({
      expired: 3,
      errored: 1,
      retried: 3,
      deadLettered: 1,
      succeeded: 5,
    });
  }, 60_000);
});
