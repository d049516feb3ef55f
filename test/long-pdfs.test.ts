/**
 * Documents at their real size: long PDFs summarized in parts by page ranges, files that cannot
 * be sent refused (apart from dead letters) and retried, progress counted in calls across an
 * interrupt and a resume. Through the real worker, the real SDK and the mock, which charges a
 * PDF by its pages (1,500 to 3,000 tokens each).
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import type { Redis } from 'ioredis';
import { PDFDocument, StandardFonts } from 'pdf-lib';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type BatchSummarizeOptions, runBatchSummarize } from '../producer/batch/summarize.ts';
import { COMBINE_PROMPT } from '../producer/documents/long-document.ts';
import { Producer } from '../producer/producer.ts';
import { resolveConfig } from '../shared/config.ts';
import { CostExceedsLimitError } from '../shared/errors.ts';
import { fleetLimitsOf, writeFleetLimits } from '../shared/fleet-limits.ts';
import type { JobResult } from '../shared/job.ts';
import type { QueueNames } from '../shared/keys.ts';
import type { MessagesRequest } from '../shared/request.ts';
import { makePdf } from '../testing/media.ts';
import { type MockAnthropicHandle, startMockAnthropic } from '../testing/mock-anthropic/index.ts';
import { callProvider, createProviderClient, type ProviderCaller } from '../worker/provider.ts';
import { startWorker, type WorkerOptions } from '../worker/worker.ts';
import { deleteKeys, newRedis, testNames, until } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
let dir: string;
let mock: MockAnthropicHandle;
const closers: (() => Promise<unknown>)[] = [];

beforeEach(async () => {
  redis = newRedis();
  names = testNames('longpdf');
  dir = mkdtempSync(join(tmpdir(), 'llmq-longpdf-'));
  mkdirSync(join(dir, 'docs'));
  mock = await startMockAnthropic({ latencyMs: 5 });
});
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
  await mock.close();
  await deleteKeys(redis, names.prefix);
  redis.disconnect();
  rmSync(dir, { recursive: true, force: true });
});

/** The workers' limits, stored for the fleet (what `llmq worker --itpm N --window 1` does). */
async function fleetItpm(itpm: number): Promise<void> {
  const config = resolveConfig({ flags: { itpm: String(itpm), window: '1' }, env: {} });
  await writeFleetLimits(redis, names, fleetLimitsOf(config), 'test');
}

/** llmq's worker against the mock; `seen` gets each request sent; a held one waits for stop. */
async function worker(
  limiter: WorkerOptions['limiter'],
  seen: MessagesRequest[] = [],
  hold?: (r: MessagesRequest) => boolean,
): Promise<{ stop(): Promise<void> }> {
  const client = createProviderClient({ apiKey: 'sk-test-longpdf', baseURL: mock.url });
  const provider: ProviderCaller = async (request, o) => {
    if (hold?.(request))
      await new Promise((_, reject) => o.signal?.addEventListener('abort', reject));
    seen.push(request);
    return callProvider(client, request, o);
  };
  const conn = newRedis();
  const w = await startWorker({ redis: conn, names, provider, limiter, concurrency: 4 });
  const stop = async () => {
    await w.stop(200).catch(() => {});
    conn.disconnect();
  };
  closers.push(stop);
  return { stop };
}

/** A producer that counts with the mock's count_tokens (as `createProducer` does with a key). */
function producer(): Producer {
  const p = new Producer({
    redis,
    names,
    tokenCounter: new Anthropic({ apiKey: 'sk-test-longpdf', baseURL: mock.url, maxRetries: 0 }),
  });
  closers.push(() => p.close());
  return p;
}

function sink(isTTY = false) {
  let text = '';
  const write = (c: string) => {
    text += c;
    return true;
  };
  return { isTTY, write, text: () => text };
}

function summarize(extra: Partial<BatchSummarizeOptions> = {}) {
  const report = sink();
  const progress = sink();
  const run = runBatchSummarize({
    paths: [join(dir, 'docs')],
    out: join(dir, 'results.jsonl'),
    producer: producer(),
    maxTokens: 64,
    progress,
    report,
    ...extra,
  });
  return { run, report, progress };
}

interface Line {
  file: string;
  id: string;
  summary?: string;
  parts?: number;
  error?: string;
  refused?: string;
  usage?: { input_tokens: number; output_tokens: number };
}
const readLines = (): Line[] =>
  readFileSync(join(dir, 'results.jsonl'), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Line);

const isCombine = (r: MessagesRequest) => r.system === COMBINE_PROMPT;

/** The PDF a part's request sends, and the text that says which pages it holds. */
async function partOf(r: MessagesRequest): Promise<{ pages: number; says: string }> {
  const blocks = r.messages[0]!.content as {
    type: string;
    source?: { data: string };
    text?: string;
  }[];
  const doc = await PDFDocument.load(Buffer.from(blocks[0]!.source!.data, 'base64'));
  return { pages: doc.getPageCount(), says: blocks[1]?.text ?? '' };
}

/** A PDF that says it is encrypted (an /Encrypt entry in its trailer). */
async function encryptedPdf(): Promise<Uint8Array> {
  const doc = await PDFDocument.create();
  const font = await doc.embedFont(StandardFonts.Helvetica);
  doc.addPage().drawText('Quarterly figures, not for circulation.', { x: 50, y: 700, font });
  const text = Buffer.from(await doc.save({ useObjectStreams: false })).toString('latin1');
  const trailer = 'trailer\n<<\n/Encrypt << /Filter /Standard /V 1 /R 2 /O (o) /U (u) /P -4 >>';
  return Buffer.from(text.replace('trailer\n<<', trailer), 'latin1');
}

describe('long PDFs: summarized in parts by page ranges, then combined', () => {
  it('a 60-page PDF is cut into page ranges that each fit the input limit, and combined', async () => {
    await fleetItpm(40_000);
    writeFileSync(join(dir, 'docs', 'annual-report.pdf'), await makePdf(60, 50, 7));
    const seen: MessagesRequest[] = [];
    await worker({ limits: { inputTokens: 40_000 }, windowMs: 1_000 }, seen);
    const { run, report } = summarize();
    const r = await run;
    expect(r).toMatchObject({ succeeded: 1, split: 1, refused: [], failed: [], exitCode: 0 });
    const [line] = readLines();
    const parts = seen.filter((q) => !isCombine(q));
    expect(line!.parts).toBe(parts.length);
    expect(parts.length).toBeGreaterThanOrEqual(3);
    expect(seen.filter(isCombine)).toHaveLength(1);

    // The parts are the PDF's pages, in order, each once: runs of pages, each a PDF of its own.
    let next = 1;
    for (const q of parts.sort((a, b) => pageFrom(a) - pageFrom(b))) {
      const { pages, says } = await partOf(q);
      expect(says).toBe(`This is pages ${next} to ${next + pages - 1} of a document of 60 pages.`);
      next += pages;
    }
    expect(next).toBe(61);

    // The provider charged each page 1,500 to 3,000 tokens, and no call above the limit.
    const producerOf = new Producer({ redis, names });
    closers.push(() => producerOf.close());
    const flow = await producerOf.queue.getJob(line!.id);
    const answers = Object.values((await flow!.getChildrenValues<JobResult>()) ?? {});
    const inputs = answers.map((a) => a.message.usage.input_tokens);
    for (const n of inputs) expect(n).toBeLessThanOrEqual(40_000);
    const charged = inputs.reduce((a, b) => a + b, 0);
    expect(charged).toBeGreaterThan(60 * 1_500);
    expect(charged).toBeLessThan(60 * 3_000);
    expect(mock.stats().responses['429'] ?? 0).toBe(0);
    // Its cost came from the provider's own count, within the fleet's budget for it.
    expect(mock.stats().countTokensCalls).toBeGreaterThanOrEqual(1);
    expect(mock.stats().countTokensCalls).toBeLessThanOrEqual(100);
    expect(report.text()).toMatch(
      /1 summarized, 0 refused, 0 dead-lettered, .*1 summarized in parts/,
    );
  }, 120_000);

  it('a PDF that cannot be parsed and an encrypted one are refused, each with its reason', async () => {
    writeFileSync(join(dir, 'docs', 'broken.pdf'), '%PDF-1.4\nthis is no PDF at all\n');
    writeFileSync(join(dir, 'docs', 'locked.pdf'), await encryptedPdf());
    writeFileSync(join(dir, 'docs', 'notes.md'), 'The pool ran 40 jobs; none was lost.\n');
    await worker({});
    const { run, report } = summarize();
    const r = await run;
    expect(r).toMatchObject({ succeeded: 1, failed: [], exitCode: 1 });
    const broken = join(dir, 'docs', 'broken.pdf');
    const locked = join(dir, 'docs', 'locked.pdf');
    expect(r.refused.map((f) => f.file).sort()).toEqual([broken, locked]);
    const lines = readLines();
    expect(lines.find((l) => l.file === broken)!.refused).toMatch(
      /^cannot be read as a PDF \(.+\): open it and export it as PDF again$/,
    );
    expect(lines.find((l) => l.file === locked)!.refused).toMatch(
      /^is encrypted \(password-protected\).*save a copy without the password$/,
    );
    // Refused before they were queued: nothing was sent for them, nothing is dead-lettered.
    expect(mock.stats().admitted).toBe(1);
    expect(report.text()).toMatch(/1 summarized, 2 refused, 0 dead-lettered/);
    expect(report.text()).toContain(`  refused: ${broken}: cannot be read as a PDF`);
    expect(report.text()).toContain(`  refused: ${locked}: is encrypted`);
  }, 60_000);
});

describe('refused is not dead', () => {
  it('refused files are listed at the end, kept on a rerun, and tried again with --retry-failed', async () => {
    // A page of this PDF needs about 1,800 input tokens: more than a call may hold here.
    await fleetItpm(1_000);
    writeFileSync(join(dir, 'docs', 'scan.pdf'), await makePdf(2, 50, 3));
    writeFileSync(join(dir, 'docs', 'memo.txt'), 'Ship on Friday; the pool is ready.\n');
    await worker({});
    const first = summarize();
    const r = await first.run;
    const scan = join(dir, 'docs', 'scan.pdf');
    expect(r).toMatchObject({ succeeded: 1, failed: [], exitCode: 1 });
    expect(r.refused).toHaveLength(1);
    expect(r.refused[0]!.reason).toMatch(
      /^page 1 alone needs \d+ input tokens, more than one call may hold under the limits \(1000\): raise the input limit to at least \d+$/,
    );
    expect(first.report.text()).toContain(`  refused: ${scan}: page 1 alone needs`);
    expect(first.report.text()).toContain('--retry-failed');
    expect(readLines().find((l) => l.file === scan)).toMatchObject({
      refused: r.refused[0]!.reason,
    });
    const sent = mock.stats().admitted;

    // A rerun keeps the refusal and sends nothing.
    const again = await summarize().run;
    expect(again).toMatchObject({ skipped: 2, enqueued: 0, exitCode: 1 });
    expect(again.refused).toHaveLength(1);
    expect(mock.stats().admitted).toBe(sent);

    // With room for a page, --retry-failed summarizes it (the summary is its line now).
    await fleetItpm(40_000);
    const retried = await summarize({ retryFailed: true }).run;
    expect(retried).toMatchObject({ succeeded: 2, refused: [], failed: [], exitCode: 0 });
    const scanLines = readLines().filter((l) => l.file === scan);
    expect(scanLines).toHaveLength(2);
    expect(scanLines[1]!.summary).toEqual(expect.any(String));
  }, 60_000);

  it('the refusal of a request names the input when the input is what does not fit', async () => {
    await fleetItpm(2_000);
    const p = producer();
    const long = {
      model: 'claude-test-1',
      max_tokens: 64,
      messages: [{ role: 'user', content: 'word '.repeat(3_000) }],
    };
    const err = await p.enqueue(long).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CostExceedsLimitError);
    expect((err as Error).message).toMatch(
      /needs \d+ inputTokens .*: the input is too long for one call/,
    );
    expect((err as Error).message).not.toContain('max_tokens');
    // The tokens limit with a short input: max_tokens is what to lower, and by how much.
    const config = resolveConfig({ flags: { tpm: '1000', window: '1' }, env: {} });
    await writeFleetLimits(redis, names, fleetLimitsOf(config), 'test');
    await p.loadLimits(true);
    const wordy = {
      model: 'claude-test-1',
      max_tokens: 990,
      messages: [{ role: 'user', content: 'Hello there' }],
    };
    const tokens = await p.enqueue(wordy).catch((e: unknown) => e);
    expect((tokens as Error).message).toMatch(
      /: lower max_tokens to at most \d+ or shorten the input/,
    );
  });
});

describe('progress in parts', () => {
  it('counts a split document by its calls across an interrupt and a resume, and reports true counts', async () => {
    await fleetItpm(8_000);
    writeFileSync(join(dir, 'docs', 'a-memo.txt'), 'The pool ran 40 jobs; none was lost.\n');
    writeFileSync(join(dir, 'docs', 'b-report.pdf'), await makePdf(12, 50, 11));
    // The first worker runs every part but holds the final call until the run is interrupted.
    const seen: MessagesRequest[] = [];
    let held = false;
    const first = await worker(
      { limits: { inputTokens: 8_000 }, windowMs: 1_000 },
      seen,
      (q) => (held ||= isCombine(q)),
    );
    const ac = new AbortController();
    const one = summarize({ signal: ac.signal });
    await until(() => held && readLines().length === 1, 60_000, 50);
    const parts = seen.length - 1;
    expect(parts).toBeGreaterThanOrEqual(3);
    await until(
      () => one.progress.text().includes(`(${parts + 1}/${parts + 2} calls)`),
      10_000,
      20,
    );
    ac.abort();
    const r1 = await one.run;
    await first.stop();
    expect(r1).toMatchObject({ interrupted: true, succeeded: 1, split: 0, pending: 1 });
    expect(one.report.text()).not.toContain('summarized in parts');
    expect(one.progress.text().trim().split('\n').at(-1)).toMatch(
      new RegExp(`^progress: 1/2 files \\(${parts + 1}/${parts + 2} calls\\), 0 refused, 0 dead`),
    );

    // The resumed run's first line counts what is done; it makes only the final call.
    const admitted = mock.stats().admitted;
    await worker({ limits: { inputTokens: 8_000 }, windowMs: 1_000 });
    const two = summarize();
    const r2 = await two.run;
    expect(r2).toMatchObject({ succeeded: 2, split: 1, skipped: 1, reattached: 1, exitCode: 0 });
    const shown = two.progress.text().trim().split('\n');
    expect(shown[1]).toMatch(/^progress: 1\/2 files \(1\/2 calls\), 0 refused, 0 dead/);
    expect(shown.at(-1)).toMatch(
      new RegExp(`^progress: 2/2 files \\(${parts + 2}/${parts + 2} calls\\), 0 refused, 0 dead`),
    );
    expect(mock.stats().admitted).toBe(admitted + 1);
    expect(two.report.text()).toMatch(/2 summarized, .*1 summarized in parts/);
  }, 120_000);
});

/** The first page a part's request holds, from the text that says so (the whole PDF: 1). */
function pageFrom(r: MessagesRequest): number {
  const blocks = r.messages[0]!.content as { text?: string }[];
  return Number(/pages? (\d+)/.exec(blocks[1]?.text ?? '')?.[1] ?? 1);
}
