/**
 * Documents at their real size: long PDFs summarized in parts by page ranges, files that cannot
 * be sent refused (apart from dead letters) and retried, progress counted in calls across an
 * interrupt and a resume. Through the real worker, the real SDK and the mock, which charges a
 * PDF by its pages (1,500 to 3,000 tokens each).
 */
import { writeFileSync } from 'node:fs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { RunEta } from '../producer/batch/run-eta.ts';
import { COMBINE_PROMPT } from '../producer/documents/long-document.ts';
import { CostExceedsLimitError } from '../shared/errors.ts';
import type { JobResult } from '../shared/job.ts';
import { resolvePriority } from '../shared/priority.ts';
import type { MessagesRequest } from '../shared/request.ts';
import { makePdf } from '../testing/media.ts';
import { DocumentRun, encryptedPdf, pageFrom, partOf } from './fixtures/document-run.ts';
import { until } from './helpers.ts';

let t: DocumentRun;
beforeEach(async () => {
  t = await DocumentRun.open('longpdf');
});
afterEach(() => t.close());

const isCombine = (r: MessagesRequest) => r.system === COMBINE_PROMPT;

describe('long PDFs: summarized in parts by page ranges, then combined', () => {
  it('a 60-page PDF is cut into page ranges that each fit the input limit, and combined', async () => {
    await t.fleetLimits({ itpm: '40000' });
    writeFileSync(t.doc('annual-report.pdf'), await makePdf(60, 50, 7));
    const seen: MessagesRequest[] = [];
    await t.worker({ limits: { inputTokens: 40_000 }, windowMs: 1_000 }, seen);
    const { run, report } = t.summarize();
    const r = await run;
    expect(r).toMatchObject({ succeeded: 1, split: 1, refused: [], failed: [], exitCode: 0 });
    const [line] = t.lines();
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
    const flow = await t.producer().queue.getJob(line!.id);
    const answers = Object.values((await flow!.getChildrenValues<JobResult>()) ?? {});
    const inputs = answers.map((a) => a.message.usage.input_tokens);
    for (const n of inputs) expect(n).toBeLessThanOrEqual(40_000);
    const charged = inputs.reduce((a, b) => a + b, 0);
    expect(charged).toBeGreaterThan(60 * 1_500);
    expect(charged).toBeLessThan(60 * 3_000);
    expect(t.mock.stats().responses['429'] ?? 0).toBe(0);
    // Its cost came from the provider's own count, within the fleet's budget for it.
    expect(t.mock.stats().countTokensCalls).toBeGreaterThanOrEqual(1);
    expect(t.mock.stats().countTokensCalls).toBeLessThanOrEqual(100);
    expect(report.text()).toMatch(
      /1 summarized, 0 refused, 0 dead-lettered, .*1 summarized in parts/,
    );
  }, 120_000);

  it('a PDF that cannot be parsed and an encrypted one are refused, each with its reason', async () => {
    writeFileSync(t.doc('broken.pdf'), '%PDF-1.4\nthis is no PDF at all\n');
    writeFileSync(t.doc('locked.pdf'), await encryptedPdf());
    writeFileSync(t.doc('notes.md'), 'The pool ran 40 jobs; none was lost.\n');
    await t.worker({});
    const { run, report } = t.summarize();
    const r = await run;
    expect(r).toMatchObject({ succeeded: 1, failed: [], exitCode: 1 });
    const broken = t.doc('broken.pdf');
    const locked = t.doc('locked.pdf');
    expect(r.refused.map((f) => f.file).sort()).toEqual([broken, locked]);
    const lines = t.lines();
    expect(lines.find((l) => l.file === broken)!.refused).toMatch(
      /^cannot be read as a PDF \(.+\): open it and export it as PDF again$/,
    );
    expect(lines.find((l) => l.file === locked)!.refused).toMatch(
      /^is encrypted \(password-protected\).*save a copy without the password$/,
    );
    // Refused before they were queued: nothing was sent for them, nothing is dead-lettered.
    expect(t.mock.stats().admitted).toBe(1);
    expect(report.text()).toMatch(/1 summarized, 2 refused, 0 dead-lettered/);
    expect(report.text()).toContain(`  refused: ${broken}: cannot be read as a PDF`);
    expect(report.text()).toContain(`  refused: ${locked}: is encrypted`);
  }, 60_000);
});

describe('refused is not dead', () => {
  it('refused files are listed at the end, kept on a rerun, and tried again with --retry-failed', async () => {
    // A page of this PDF needs about 1,800 input tokens: more than a call may hold here.
    await t.fleetLimits({ itpm: '1000' });
    writeFileSync(t.doc('scan.pdf'), await makePdf(2, 50, 3));
    writeFileSync(t.doc('memo.txt'), 'Ship on Friday; the pool is ready.\n');
    await t.worker({});
    const first = t.summarize();
    const r = await first.run;
    const scan = t.doc('scan.pdf');
    expect(r).toMatchObject({ succeeded: 1, failed: [], exitCode: 1 });
    expect(r.refused).toHaveLength(1);
    expect(r.refused[0]!.reason).toMatch(
      /^page 1 alone needs \d+ input tokens, more than one call may hold under the limits \(1000\): raise the input limit to at least \d+$/,
    );
    expect(first.report.text()).toContain(`  refused: ${scan}: page 1 alone needs`);
    expect(first.report.text()).toContain('--retry-failed');
    expect(t.lines().find((l) => l.file === scan)).toMatchObject({
      refused: r.refused[0]!.reason,
    });
    const sent = t.mock.stats().admitted;

    // A rerun keeps the refusal and sends nothing.
    const again = await t.summarize().run;
    expect(again).toMatchObject({ skipped: 2, enqueued: 0, exitCode: 1 });
    expect(again.refused).toHaveLength(1);
    expect(t.mock.stats().admitted).toBe(sent);

    // With room for a page, --retry-failed summarizes it (the summary is its line now).
    await t.fleetLimits({ itpm: '40000' });
    const retried = await t.summarize({ retryFailed: true }).run;
    expect(retried).toMatchObject({ succeeded: 2, refused: [], failed: [], exitCode: 0 });
    const scanLines = t.lines().filter((l) => l.file === scan);
    expect(scanLines).toHaveLength(2);
    expect(scanLines[1]!.summary).toEqual(expect.any(String));
  }, 60_000);

  it('the refusal of a request names the input when the input is what does not fit', async () => {
    await t.fleetLimits({ itpm: '2000' });
    const p = t.producer();
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
    await t.fleetLimits({ tpm: '1000' });
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
    await t.fleetLimits({ itpm: '8000' });
    writeFileSync(t.doc('a-memo.txt'), 'The pool ran 40 jobs; none was lost.\n');
    writeFileSync(t.doc('b-report.pdf'), await makePdf(12, 50, 11));
    // The first worker runs every part but holds the final call until the run is interrupted.
    const seen: MessagesRequest[] = [];
    let held = false;
    const first = await t.worker(
      { limits: { inputTokens: 8_000 }, windowMs: 1_000 },
      seen,
      (q) => (held ||= isCombine(q)),
    );
    const ac = new AbortController();
    const one = t.summarize({ signal: ac.signal });
    await until(() => held && t.lines().length === 1, 60_000, 50);
    const parts = seen.length - 1;
    expect(parts).toBeGreaterThanOrEqual(3);
    await until(
      () => one.progress.text().includes(`(${parts + 1}/${parts + 2} calls)`),
      10_000,
      20,
    );
    ac.abort();
    const r1 = await one.run;
    await first.halt();
    expect(r1).toMatchObject({ interrupted: true, succeeded: 1, split: 0, pending: 1 });
    expect(one.report.text()).not.toContain('summarized in parts');
    expect(one.progress.text().trim().split('\n').at(-1)).toMatch(
      new RegExp(`^progress: 1/2 files \\(${parts + 1}/${parts + 2} calls\\), 0 refused, 0 dead`),
    );

    // The resumed run's first line counts what is done; it makes only the final call.
    const admitted = t.mock.stats().admitted;
    await t.worker({ limits: { inputTokens: 8_000 }, windowMs: 1_000 });
    const two = t.summarize();
    const r2 = await two.run;
    expect(r2).toMatchObject({ succeeded: 2, split: 1, skipped: 1, reattached: 1, exitCode: 0 });
    const shown = two.progress.text().trim().split('\n');
    expect(shown[1]).toMatch(/^progress: 1\/2 files \(1\/2 calls\), 0 refused, 0 dead/);
    expect(shown.at(-1)).toMatch(
      new RegExp(`^progress: 2/2 files \\(${parts + 2}/${parts + 2} calls\\), 0 refused, 0 dead`),
    );
    expect(t.mock.stats().admitted).toBe(admitted + 1);
    expect(two.report.text()).toMatch(/2 summarized, .*1 summarized in parts/);
  }, 120_000);
});

describe('the ETA', () => {
  it("comes from the queue's forecast: what waits at the run's priority, at the current limits", async () => {
    // 2,000 input tokens per 10 s, and 10 jobs of about 1,000 waiting: four windows and more.
    await t.worker({ limits: { inputTokens: 2_000 }, windowMs: 10_000 });
    const producer = t.producer();
    const ask = (i: number) => ({
      model: 'claude-test-1',
      max_tokens: 16,
      messages: [{ role: 'user', content: `${'word '.repeat(560)}#${i}` }],
    });
    await producer.enqueueMany(
      Array.from({ length: 10 }, (_, i) => ask(i)),
      { priority: 'batch' },
    );
    const eta = new RunEta({
      redis: t.redis,
      names: t.names,
      priority: resolvePriority('batch'),
      headroom: () => 0,
    });
    expect(eta.etaMs()).toBeUndefined(); // Nothing read yet: the line shows `ETA ?`.
    await until(() => eta.etaMs() !== undefined, 10_000, 50);
    expect(eta.etaMs()).toBeGreaterThanOrEqual(30_000);
    expect(eta.etaMs()).toBeLessThanOrEqual(60_000);
    await eta.settled();
  }, 60_000);
});
