/**
 * How documents are costed and cut: PDF pages reserved at what the fleet learned a page costs
 * (3,000 only before anything is known), limits read from the provider's headers when none is
 * configured, Message Batches' parts bounded by the API's 100 pages, many images sent in runs,
 * and count_tokens kept within the fleet's budget for it.
 */
import { writeFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { CountTokensBudget } from '../producer/count-tokens-budget.ts';
import { COMBINE_PROMPT } from '../producer/documents/long-document.ts';
import { PDF_PAGE_TOKENS } from '../shared/media-estimate.ts';
import type { MessagesRequest } from '../shared/request.ts';
import { imageBlock, makePdf, pdfBlock, png } from '../testing/media.ts';
import { DocumentRun, partOf } from './fixtures/document-run.ts';
import { settledInputs } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

let t: DocumentRun | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

const MODEL = 'claude-haiku-4-5';
const isCombine = (r: MessagesRequest) => r.system === COMBINE_PROMPT;
const ask = (content: unknown[]) => ({
  model: MODEL,
  max_tokens: 64,
  messages: [{ role: 'user', content }],
});

describe('what a PDF page costs', () => {
  it('reserves 3,000 tokens a page until the fleet learned what a page costs, then that', async () => {
    t = await DocumentRun.open('pagecost');
    const run = t;
    const producer = t.producer({ tokenCounter: undefined });
    const worker = await t.worker({ limits: { inputTokens: 200_000 } });
    const pdf = (i: number) => ask([pdfBlock(Buffer.from([])), { type: 'text', text: `#${i}` }]);
    const pdfOf = async (pages: number, i: number) => {
      const r = pdf(i);
      r.messages[0]!.content[0] = pdfBlock(await makePdf(pages, 30, i));
      return r;
    };
    // Nothing known: a page at the most the API charges.
    const cold = producer.prepare(await pdfOf(8, 0));
    expect(cold.pdfPages).toEqual({ pages: 8, perPage: PDF_PAGE_TOKENS });
    for (let i = 1; i <= 4; i++)
      await producer.waitForResult(await producer.enqueue(await pdfOf(3 + i, i)));
    await until(async () => (await settledInputs(worker)).settled === 4, 5_000);
    // The producer reads what the fleet learned again once its reading is a second old.
    await until(async () => (await producer.costing.pageCosts.read(MODEL)).warm, 5_000);
    const learned = await producer.costing.pageCosts.read(MODEL);
    expect(learned).toMatchObject({ warm: true, observations: 4 });
    // A page is reserved at the most one cost, and a margin: well below 3,000 here.
    expect(learned.perPage).toBeGreaterThanOrEqual(learned.high);
    expect(learned.perPage).toBeLessThan(2_200);

    // Now a PDF is reserved at that, by the producer's check and by the gate.
    const before = await settledInputs(worker);
    const id = await producer.enqueue(await pdfOf(9, 9));
    const job = await run.producer().queue.getJob(id);
    expect(job!.data.pdfPages).toEqual({ pages: 9, perPage: learned.perPage });
    const result = await producer.waitForResult(id);
    await until(async () => (await settledInputs(worker)).settled === 5, 5_000);
    const after = await settledInputs(worker);
    const reserved = after.settledReservedIn - before.settledReservedIn;
    const text = job!.data.cost.inputTokens - 9 * PDF_PAGE_TOKENS;
    expect(reserved).toBe(text + 9 * learned.perPage);
    expect(reserved).toBeGreaterThanOrEqual(result.message.usage.input_tokens);
    expect(run.mock.stats().responses['429'] ?? 0).toBe(0);
  }, 60_000);
});

describe('limits nobody configured', () => {
  it("reads the input limit from the provider's first answer and cuts a long PDF to fit it", async () => {
    t = await DocumentRun.open('readlimits', {
      limits: { inputTokens: 20_000 },
      windowMs: 1_000,
      algorithm: 'bucket',
      roundReadings: 1_000,
    });
    writeFileSync(t.doc('a-note.md'), 'The pool ran 40 jobs; none was lost.\n');
    writeFileSync(t.doc('b-manual.pdf'), await makePdf(30, 50, 5));
    const seen: MessagesRequest[] = [];
    // No limit anywhere: the worker reads them from the headers, and so does the run.
    await t.worker({ windowMs: 1_000 }, seen);
    const { run, progress } = t.summarize();
    const r = await run;
    expect(r).toMatchObject({ succeeded: 2, split: 1, refused: [], failed: [], exitCode: 0 });
    expect(progress.text()).toContain('no input limit known yet');
    // The smallest file went first, alone; the PDF was planned with the limit it brought.
    expect(seen[0]!.messages[0]!.content).toContain('The pool ran 40 jobs');
    const parts = seen.filter((q) => q.messages[0]!.content !== seen[0]!.messages[0]!.content);
    expect(parts.filter((q) => !isCombine(q)).length).toBeGreaterThanOrEqual(3);
    expect(t.mock.stats().responses['429'] ?? 0).toBe(0);
  }, 60_000);
});

describe('Message Batches', () => {
  it('a PDF above the 100 pages a request may hold goes in parts of at most 100 pages', async () => {
    t = await DocumentRun.open('batchpdf');
    // Blank pages: 1,500 tokens each, 195,000 in all, within the model's context.
    const producer = t.producer();
    const doc = await producer.enqueueDocument(
      { pdf: await makePdf(130, 0, 2) },
      { maxTokens: 64, via: 'batches' },
    );
    expect(doc.parts).toBe(2);
    const parts = await Promise.all(doc.partIds.map((id) => producer.batchJobs.queue.getJob(id)));
    const pages = await Promise.all(parts.map(async (j) => (await partOf(j!.data.request)).pages));
    expect(pages).toEqual([65, 65]);
    // The combine job goes through messages, once its parts are done.
    expect(await producer.queue.getJobState(doc.id)).toBe('waiting-children');
  }, 60_000);
});

describe('content blocks', () => {
  it('many images in one document are sent in runs that each fit a call, then combined', async () => {
    t = await DocumentRun.open('images');
    await t.fleetLimits({ itpm: '5000' });
    const seen: MessagesRequest[] = [];
    await t.worker({ limits: { inputTokens: 5_000 }, windowMs: 1_000 }, seen);
    const producer = t.producer();
    // 1000 × 1000 pixels: 1,334 tokens each (× 1.05 reserved); three fit under 5,000.
    const images = Array.from({ length: 10 }, () => imageBlock(png(1000, 1000), 'image/png'));
    const doc = await producer.enqueueDocument({ blocks: images }, { maxTokens: 64 });
    expect(doc.parts).toBe(4);
    await producer.waitForResult(doc.id);
    const parts = seen.filter((q) => !isCombine(q));
    const sizes = parts.map((q) => (q.messages[0]!.content as unknown[]).length);
    expect(sizes.sort()).toEqual([1, 3, 3, 3]);
    expect(seen.filter(isCombine)).toHaveLength(1);
    expect(t.mock.stats().responses['429'] ?? 0).toBe(0);
  }, 60_000);
});

describe("the fleet's count_tokens budget", () => {
  it('counts no more than the budget allows, shared with llmq serve, and goes on by the guess', async () => {
    t = await DocumentRun.open('countbudget');
    await t.fleetLimits({ itpm: '100000' });
    for (let i = 0; i < 4; i++) writeFileSync(t.doc(`report-${i}.pdf`), await makePdf(3, 20, i));
    await t.worker({});
    const [startS] = await t.redis.time();
    const r = await t.summarize({ producer: t.producer({ countTokensRpm: 2 }) }).run;
    const [endS] = await t.redis.time();
    expect(r).toMatchObject({ succeeded: 4, refused: [], failed: [] });
    // Each cold PDF asked for a count; the budget gave 2 a minute.
    const minutes = Math.floor(Number(endS) / 60) - Math.floor(Number(startS) / 60) + 1;
    expect(t.mock.stats().countTokensCalls).toBeLessThanOrEqual(2 * minutes);
    expect(t.mock.stats().countTokensCalls).toBeGreaterThanOrEqual(1);
    // The gateway's forwarder counts in the same budget: this minute's may be spent.
    const budget = new CountTokensBudget({ redis: t.redis, names: t.names, rpm: 2 });
    if (minutes === 1) expect(await budget.take()).toMatchObject({ ok: false, limit: 2 });
  }, 60_000);
});

describe('the parts of a PDF', () => {
  it('a count above a call sends the parts counted, each reserved as the provider counted it', async () => {
    t = await DocumentRun.open('countedparts');
    await t.fleetLimits({ itpm: '12000' });
    const producer = t.producer();
    const doc = await producer.enqueueDocument(
      { pdf: await makePdf(14, 50, 4) },
      { maxTokens: 64 },
    );
    expect(doc.parts).toBeGreaterThanOrEqual(3);
    // The whole, then each part, counted once.
    expect(doc.counted).toBe(doc.parts + 1);
    const jobs = await Promise.all(doc.partIds.map((id) => producer.queue.getJob(id)));
    let pages = 0;
    for (const job of jobs) {
      expect(job!.data.inputCounted).toBe(true);
      expect(job!.data.cost.inputTokens).toBeLessThanOrEqual(12_000);
      pages += (await partOf(job!.data.request)).pages;
    }
    expect(pages).toBe(14);
  }, 60_000);
});
