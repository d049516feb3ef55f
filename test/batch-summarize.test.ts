import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Worker } from 'bullmq';
import { describe, expect, it } from 'vitest';
import { Progress } from '../producer/batch/progress.ts';
import { ResultsFile } from '../producer/batch/results-file.ts';
import { type BatchReport, runBatchSummarize } from '../producer/batch/summarize.ts';
import { Producer } from '../producer/producer.ts';
import type { JobData, JobResult } from '../shared/job.ts';
import { bullPrefix } from '../shared/keys.ts';
import type { MockAnthropicOptions } from '../testing/mock-anthropic/index.ts';
import { eachTestBatch, workerOnMock } from './fixtures/batch-bed.ts';
import { type FakeWorker, startFakeWorker } from './fixtures/fake-worker.ts';
import { REDIS_URL, tsxEval, until } from './helpers.ts';

const bed = eachTestBatch('batch');

/** Writes `n` small documents: half at the top, half in a nested folder, .txt and .md. */
function writeDocs(n: number, poison: readonly number[] = []): string[] {
  const docs = join(bed.dir, 'docs');
  mkdirSync(join(docs, 'nested', 'deeper'), { recursive: true });
  const files: string[] = [];
  for (let i = 0; i < n; i++) {
    const sub = i % 2 === 0 ? '' : i % 4 === 1 ? 'nested' : join('nested', 'deeper');
    const file = join(docs, sub, `doc-${String(i).padStart(3, '0')}.${i % 3 === 0 ? 'md' : 'txt'}`);
    const body = poison.includes(i)
      ? `POISON: document ${i} is one the worker cannot take.`
      : `Document ${i}. `.repeat(20 + (i % 7));
    writeFileSync(file, body);
    files.push(file);
  }
  writeFileSync(join(docs, 'ignored.json'), '{}');
  writeFileSync(join(docs, 'empty.txt'), '   \n');
  return files;
}

function makeProducer(maxDepth = 0): Producer {
  const p = new Producer({ redis: bed.redis, names: bed.names, maxDepth, retryAfterMs: 100 });
  bed.closers.push(() => p.close());
  return p;
}

/** llmq's worker calling the mock, `concurrency` calls at once. */
const realPath = (mockOptions: MockAnthropicOptions = {}, concurrency = 8) =>
  workerOnMock(bed, { mock: mockOptions, concurrency, maxInFlight: concurrency });

/** A stand-in for llmq's worker: dead-letters "POISON" documents, summarizes the rest. */
function fakeWorker(): FakeWorker {
  const w = startFakeWorker(bed.redis, bed.names, (prompt) =>
    prompt.startsWith('POISON')
      ? {
          deadLetter: {
            reason: '400 invalid_request_error: the document was refused',
            errorClass: 'BadRequestError',
            status: 400,
          },
        }
      : {
          text: `A summary of ${prompt.length} characters.`,
          usage: { input_tokens: 40, output_tokens: 9 },
        },
  );
  bed.closers.push(() => w.close());
  return w;
}

function sink(isTTY = false) {
  let text = '';
  const write = (c: string) => {
    text += c;
    return true;
  };
  return { isTTY, write, text: () => text };
}

interface Line {
  file: string;
  id: string;
  summary?: string;
  usage?: { input_tokens: number; output_tokens: number };
  error?: string;
}

function readLines(path: string): Line[] {
  const raw = readFileSync(path, 'utf8');
  expect(raw === '' || raw.endsWith('\n')).toBe(true);
  return raw
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Line);
}

/** Jobs ever added to the queue, from BullMQ's event stream. */
async function jobsAdded(): Promise<number> {
  const entries = (await bed.redis.xrange(
    `${bullPrefix(bed.names)}:${bed.names.queue}:events`,
    '-',
    '+',
  )) as [string, string[]][];
  return entries.filter(([, f]) => f[0] === 'event' && f[1] === 'added').length;
}

describe('llmq batch summarize', () => {
  it('gives every file exactly one result line, through the real worker and the mock provider', async () => {
    const files = writeDocs(50);
    await realPath({ latencyMs: 5 });
    const out = join(bed.dir, 'results.jsonl');
    const progress = sink();
    const report = sink();
    const r = await runBatchSummarize({
      paths: [join(bed.dir, 'docs')],
      out,
      producer: makeProducer(10),
      model: 'claude-test-batch',
      maxTokens: 64,
      progress,
      report,
    });
    expect(r).toMatchObject({
      files: 51,
      succeeded: 50,
      enqueued: 50,
      reattached: 0,
      skipped: 0,
      pending: 0,
      exitCode: 0,
    });
    expect(r.failed).toEqual([]);
    expect(r.empty).toEqual([join(bed.dir, 'docs', 'empty.txt')]);
    const lines = readLines(out);
    expect(lines).toHaveLength(50);
    expect(new Set(lines.map((l) => l.file))).toEqual(new Set(files));
    expect(new Set(lines.map((l) => l.id)).size).toBe(50);
    for (const l of lines) {
      expect(l.summary).toEqual(expect.any(String));
      expect(l.summary!.length).toBeGreaterThan(0);
      expect(l.usage).toEqual({
        input_tokens: expect.any(Number),
        output_tokens: expect.any(Number),
      });
    }
    expect(r.inputTokens).toBe(lines.reduce((s, l) => s + l.usage!.input_tokens, 0));
    expect(progress.text()).toMatch(/progress: 50\/50 files \(50\/50 calls\), 0 refused, 0 dead/);
    expect(report.text()).toMatch(
      /^batch done: 51 file\(s\), 50 summarized, 0 refused, 0 dead-lettered, 0 pending/,
    );
    expect(await jobsAdded()).toBe(50);
  }, 30_000);

  it('marks a long shared prompt for caching: one job writes it, the others read it; --no-cache-prompt sends it plain', async () => {
    writeDocs(6);
    const mock = await realPath({ latencyMs: 20 });
    const prompt = `You summarize documents for an archive. ${'Keep names, dates and figures exact. '.repeat(300)}`;
    const cachedRun = await runBatchSummarize({
      paths: [join(bed.dir, 'docs')],
      out: join(bed.dir, 'cached.jsonl'),
      producer: makeProducer(),
      model: 'claude-test-batch',
      maxTokens: 32,
      prompt,
      progress: sink(),
      report: sink(),
    });
    expect(cachedRun.succeeded).toBe(6);
    expect(mock.stats().cache).toMatchObject({ writes: 1, reads: 5 });
    expect(readLines(join(bed.dir, 'cached.jsonl'))).toHaveLength(6);

    // The same files, summarized anew without caching (another max_tokens: other jobs).
    mock.reset();
    const plain = await runBatchSummarize({
      paths: [join(bed.dir, 'docs')],
      out: join(bed.dir, 'plain.jsonl'),
      producer: makeProducer(),
      model: 'claude-test-batch',
      maxTokens: 33,
      prompt,
      cachePrompt: false,
      progress: sink(),
      report: sink(),
    });
    expect(plain.succeeded).toBe(6);
    expect(mock.stats().cache).toMatchObject({ writes: 0, reads: 0 });
  }, 30_000);

  it('lists dead-lettered files and exits 1; a rerun adds nothing; edited files are summarized again', async () => {
    const files = writeDocs(10, [3, 7]);
    const worker = fakeWorker();
    const out = join(bed.dir, 'results.jsonl');
    const report = sink();
    const first = await runBatchSummarize({
      paths: [join(bed.dir, 'docs')],
      out,
      producer: makeProducer(),
      progress: sink(),
      report,
    });
    expect(first.exitCode).toBe(1);
    expect(first.succeeded).toBe(8);
    expect(first.failed.map((f) => f.file).sort()).toEqual([files[3], files[7]].sort());
    expect(first.failed[0]!.error).toContain('the document was refused');
    expect(report.text()).toContain(`dead-lettered: ${files[3]}`);
    expect(readLines(out).filter((l) => 'error' in l)).toHaveLength(2);

    const again = await runBatchSummarize({
      paths: [join(bed.dir, 'docs')],
      out,
      producer: makeProducer(),
      progress: sink(),
      report: sink(),
    });
    expect(again).toMatchObject({
      skipped: 10,
      enqueued: 0,
      reattached: 0,
      succeeded: 8,
      exitCode: 1,
    });
    expect(readLines(out)).toHaveLength(10);

    // The documents are fixed; the worker now takes them.
    await worker.close();
    writeFileSync(files[3]!, readFileSync(files[3]!, 'utf8').replace('POISON', 'CURED'));
    writeFileSync(files[7]!, readFileSync(files[7]!, 'utf8').replace('POISON', 'CURED'));
    fakeWorker();
    const fixed = await runBatchSummarize({
      paths: [join(bed.dir, 'docs')],
      out,
      producer: makeProducer(),
      progress: sink(),
      report: sink(),
    });
    // Edited content is a new key: summarized again without any flag.
    expect(fixed).toMatchObject({ skipped: 8, enqueued: 2, succeeded: 10, exitCode: 0 });
    expect(await jobsAdded()).toBe(12);
  }, 30_000);

  it('--retry-failed enqueues failed files again under a fresh key, once', async () => {
    writeDocs(4, [1]);
    const out = join(bed.dir, 'results.jsonl');
    const poisoned = fakeWorker();
    expect(
      (
        await runBatchSummarize({
          paths: [bed.dir],
          out,
          producer: makeProducer(),
          progress: sink(),
          report: sink(),
        })
      ).exitCode,
    ).toBe(1);
    await poisoned.close();
    // This worker takes anything (the failure was the provider's, not the document's).
    const ok = new Worker<JobData, JobResult>(
      bed.names.queue,
      async (job) => ({
        message: {
          id: 'm',
          model: 'x',
          role: 'assistant',
          content: [{ type: 'text', text: 'fine now', citations: null }],
          stop_reason: 'end_turn',
          stop_sequence: null,
          usage: { input_tokens: 1, output_tokens: 1 },
        },
        latencyMs: 1,
        requestId: null,
        attempts: 1,
        completedAt: job.timestamp,
      }),
      { connection: bed.redis.duplicate(), prefix: bullPrefix(bed.names) },
    );
    bed.closers.push(() => ok.close());
    const retried = await runBatchSummarize({
      paths: [bed.dir],
      out,
      producer: makeProducer(),
      retryFailed: true,
      progress: sink(),
      report: sink(),
    });
    expect(retried).toMatchObject({ skipped: 3, enqueued: 1, succeeded: 4, exitCode: 0 });
    const lines = readLines(out);
    expect(lines).toHaveLength(5);
    expect(lines.at(-1)).toMatchObject({ summary: 'fine now' });
    const settled = await runBatchSummarize({
      paths: [bed.dir],
      out,
      producer: makeProducer(),
      retryFailed: true,
      progress: sink(),
      report: sink(),
    });
    expect(settled).toMatchObject({ skipped: 4, enqueued: 0, exitCode: 0 });
  });

  it('files with the same content share one job, and each gets its own line', async () => {
    mkdirSync(join(bed.dir, 'same'));
    for (const name of ['a.txt', 'b.md', 'c.txt'])
      writeFileSync(join(bed.dir, 'same', name), 'The same words in every file.');
    fakeWorker();
    const out = join(bed.dir, 'results.jsonl');
    const r = await runBatchSummarize({
      paths: [join(bed.dir, 'same')],
      out,
      producer: makeProducer(),
      progress: sink(),
      report: sink(),
    });
    expect(r).toMatchObject({ enqueued: 1, reattached: 2, succeeded: 3, exitCode: 0 });
    const lines = readLines(out);
    expect(lines.map((l) => l.file)).toEqual(
      ['a.txt', 'b.md', 'c.txt'].map((n) => join(bed.dir, 'same', n)),
    );
    expect(new Set(lines.map((l) => l.id)).size).toBe(1);
  });

  it('resumes after an interruption without enqueueing finished files again', async () => {
    const files = writeDocs(30);
    await realPath({ latencyMs: 40 }, 2);
    const out = join(bed.dir, 'results.jsonl');
    const ac = new AbortController();
    let seen = 0;
    const first = await runBatchSummarize({
      paths: [join(bed.dir, 'docs')],
      out,
      producer: makeProducer(6),
      maxTokens: 32,
      signal: ac.signal,
      onLine: () => {
        if (++seen === 8) ac.abort();
      },
      progress: sink(),
      report: sink(),
    });
    expect(first.interrupted).toBe(true);
    expect(first.exitCode).toBe(130);
    const kept = readLines(out);
    expect(kept.length).toBeGreaterThanOrEqual(8);
    expect(first.enqueued).toBeLessThan(30);
    // The worker goes on with what was queued while nobody collects.
    await until(
      async () =>
        (await bed.redis.zcard(`${bullPrefix(bed.names)}:${bed.names.queue}:completed`)) ===
        first.enqueued,
      60_000,
    );

    const second: BatchReport = await runBatchSummarize({
      paths: [join(bed.dir, 'docs')],
      out,
      producer: makeProducer(6),
      maxTokens: 32,
      progress: sink(),
      report: sink(),
    });
    expect(second.exitCode).toBe(0);
    expect(second.skipped).toBe(kept.length);
    expect(second.reattached).toBe(first.enqueued - kept.length);
    expect(second.enqueued).toBe(30 - first.enqueued);
    expect(await jobsAdded()).toBe(30);
    const lines = readLines(out);
    expect(lines).toHaveLength(30);
    expect(new Set(lines.map((l) => l.file))).toEqual(new Set(files));
  }, 90_000);

  it('SIGINT leaves the jobs queued and the results file valid, and exits 130', async () => {
    writeDocs(12);
    const out = join(bed.dir, 'results.jsonl');
    const script = `
      import { Command } from 'commander';
      import { registerBatchCommand } from './scripts/cli/batch.ts';
      const program = new Command('llmq');
      registerBatchCommand(program);
      await program.parseAsync(process.argv.slice(1), { from: 'user' });
    `;
    const child = spawn(
      process.execPath,
      tsxEval(script, [
        'batch',
        'summarize',
        join(bed.dir, 'docs'),
        '--out',
        out,
        '--max-tokens',
        '40',
      ]),
      {
        cwd: process.cwd(),
        env: {
          ...process.env,
          REDIS_URL,
          LLMQ_QUEUE: bed.names.queue,
          LLMQ_PREFIX: bed.names.prefix,
          LLMQ_MAX_DEPTH: '0',
          // A limit known: every file is planned (and queued) at once, with no worker running.
          LLMQ_ITPM: '100000',
        },
      },
    );
    let stderr = '';
    let stdout = '';
    child.stderr.on('data', (c) => (stderr += c));
    child.stdout.on('data', (c) => (stdout += c));
    // Nobody works the queue: once all 12 jobs are in, the run only waits.
    await until(
      async () =>
        (await bed.redis.zcard(`${bullPrefix(bed.names)}:${bed.names.queue}:prioritized`)) === 12,
      60_000,
      50,
    );
    child.kill('SIGINT');
    const [code] = await once(child, 'exit');
    expect(code).toBe(130);
    expect(stderr).toContain('interrupted');
    expect(stdout).toMatch(/^batch interrupted .*12 pending/);
    expect(existsSync(out)).toBe(true);
    expect(readLines(out)).toEqual([]);
    expect(await bed.redis.zcard(`${bullPrefix(bed.names)}:${bed.names.queue}:prioritized`)).toBe(
      12,
    );
  }, 90_000);
});

describe('results file and progress', () => {
  it('cuts a torn last line on open and keeps whole ones', () => {
    const path = join(bed.dir, 'r.jsonl');
    writeFileSync(path, '{"file":"a","id":"1","error":"x"}\n{"file":"b","id":"2","summ');
    const f = ResultsFile.open(path);
    expect(f.existing).toEqual([{ file: 'a', id: '1', error: 'x' }]);
    f.append({ file: 'c', id: '3', error: 'y' });
    f.close();
    expect(readFileSync(path, 'utf8')).toBe(
      '{"file":"a","id":"1","error":"x"}\n{"file":"c","id":"3","error":"y"}\n',
    );
    writeFileSync(path, '{"file":"a","id":"1","error":"x"}');
    const g = ResultsFile.open(path);
    expect(g.existing).toHaveLength(1);
    g.close();
    expect(readFileSync(path, 'utf8')).toBe('{"file":"a","id":"1","error":"x"}\n');
  });

  it('redraws one line on a terminal, and writes plain lines elsewhere', () => {
    let t = 0;
    const tty = sink(true);
    const p = new Progress(tty, () => t);
    const state = {
      files: 4,
      succeeded: 1,
      refused: 1,
      failed: 0,
      calls: 12,
      callsDone: 6,
      tokens: 12_345,
      etaMs: 62_000,
    };
    t = 2_000;
    p.update(state);
    t = 2_050;
    p.update({ ...state, succeeded: 2 }); // too soon: not redrawn
    p.finish();
    expect(tty.text()).toBe(
      '\r\x1b[2K[############------------] 2/4 files (6/12 calls), 1 refused, 0 dead | 12.3k tokens | ETA 1m02s\n',
    );
    const plain = sink(false);
    const q = new Progress(plain, () => t);
    q.update(state);
    q.update(state);
    q.update({ ...state, callsDone: 12, succeeded: 3 });
    expect(plain.text()).toBe(
      'progress: 2/4 files (6/12 calls), 1 refused, 0 dead | 12.3k tokens | ETA 1m02s\n' +
        'progress: 4/4 files (12/12 calls), 1 refused, 0 dead | 12.3k tokens | ETA 0s\n',
    );
  });
});
