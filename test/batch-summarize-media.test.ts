/**
 * `llmq batch summarize` over PDFs and images: each sent whole as a document or image block,
 * through the real worker and the mock (which reads the PDF's pages), end to end.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { collectFiles } from '../producer/batch/collect-files.ts';
import { runBatchSummarize } from '../producer/batch/summarize.ts';
import { Producer } from '../producer/producer.ts';
import { ConfigError } from '../shared/errors.ts';
import { jpeg, makePdf, png } from '../testing/media.ts';
import type { MockAnthropicHandle } from '../testing/mock-anthropic/index.ts';
import { eachTestBatch, workerOnMock } from './fixtures/batch-bed.ts';

const bed = eachTestBatch('batchpdf');

/** A producer, and a worker calling the mock. */
async function realPath(): Promise<{ producer: Producer; mock: MockAnthropicHandle }> {
  const mock = await workerOnMock(bed, { mock: { latencyMs: 5 }, concurrency: 4 });
  const producer = new Producer({ redis: bed.redis, names: bed.names });
  bed.closers.push(() => producer.close());
  return { producer, mock };
}

const quiet = { write: () => true, isTTY: false };

/** Summarizes the test's docs folder into `out`, quietly. */
function summarizeDocs(producer: Producer, out: string, images = false) {
  return runBatchSummarize({
    paths: [join(bed.dir, 'docs')],
    out,
    producer,
    images,
    progress: quiet,
    report: quiet,
  });
}

interface Line {
  file: string;
  id: string;
  summary?: string;
  usage?: { input_tokens: number; output_tokens: number };
  error?: string;
  refused?: string;
}

function readLines(path: string): Line[] {
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Line);
}

/** A folder of PDFs of 1 to 4 pages (and a text file and a picture beside them). */
async function writeFolder(): Promise<Map<string, number>> {
  const pages = new Map<string, number>();
  mkdirSync(join(bed.dir, 'docs', 'more'), { recursive: true });
  for (let i = 0; i < 6; i++) {
    const file = join(bed.dir, 'docs', i % 2 ? 'more' : '', `report-${i}.pdf`);
    writeFileSync(file, await makePdf(1 + (i % 4), 12, i));
    pages.set(file, 1 + (i % 4));
  }
  writeFileSync(
    join(bed.dir, 'docs', 'notes.txt'),
    'The pool ran 40 jobs; none was lost. '.repeat(10),
  );
  writeFileSync(join(bed.dir, 'docs', 'chart.png'), png(800, 600));
  return pages;
}

describe('batch summarize with PDFs and images', () => {
  it('summarizes a folder of PDFs end to end, each sent whole as a document', async () => {
    const pages = await writeFolder();
    const { producer, mock } = await realPath();
    const out = join(bed.dir, 'results.jsonl');
    const report = await summarizeDocs(producer, out);
    expect(report).toMatchObject({ files: 7, succeeded: 7, failed: [], exitCode: 0 });
    const lines = readLines(out);
    expect(lines.map((l) => l.file).sort()).toEqual(
      [...pages.keys(), join(bed.dir, 'docs', 'notes.txt')].sort(),
    );
    for (const [file, n] of pages) {
      const line = lines.find((l) => l.file === file)!;
      expect(line.summary).toMatch(/\w+/);
      // The provider read the pages: 1,500 to 3,000 tokens each.
      expect(line.usage!.input_tokens).toBeGreaterThanOrEqual(1_500 * n);
      expect(line.usage!.input_tokens).toBeLessThan(3_000 * n + 200);
    }
    expect(mock.stats().admitted).toBe(7);

    // A rerun finds every result and sends nothing.
    const again = await summarizeDocs(producer, out);
    expect(again).toMatchObject({ skipped: 7, enqueued: 0, succeeded: 7 });
    expect(mock.stats().admitted).toBe(7);
  });

  it('takes images when asked, each as an image block, and records an unreadable one as refused', async () => {
    await writeFolder();
    writeFileSync(join(bed.dir, 'docs', 'photo.jpg'), jpeg(1600, 1200));
    writeFileSync(join(bed.dir, 'docs', 'broken.webp'), 'not a picture at all');
    const { producer } = await realPath();
    const out = join(bed.dir, 'results.jsonl');
    const report = await summarizeDocs(producer, out, true);
    expect(report).toMatchObject({ files: 10, succeeded: 9, exitCode: 1 });
    const lines = readLines(out);
    const chart = lines.find((l) => l.file.endsWith('chart.png'))!;
    // 800 × 600 / 750 = 640 tokens of image, and a few of prompt.
    expect(chart.usage!.input_tokens).toBeGreaterThan(640);
    expect(chart.usage!.input_tokens).toBeLessThan(760);
    const broken = lines.find((l) => l.file.endsWith('broken.webp'))!;
    expect(broken.refused).toContain('is not a PNG, JPEG, GIF or WebP image');
    expect(broken.id).toMatch(/\w/);
    expect(report.refused).toEqual([{ file: broken.file, id: broken.id, reason: broken.refused }]);
  });

  it('leaves images out unless asked, and says how when one is named', async () => {
    await writeFolder();
    const files = await collectFiles([join(bed.dir, 'docs')]);
    expect(files.some((f) => f.endsWith('.png'))).toBe(false);
    expect(files.filter((f) => f.endsWith('.pdf'))).toHaveLength(6);
    const named = collectFiles([join(bed.dir, 'docs', 'chart.png')]);
    await expect(named).rejects.toThrow(ConfigError);
    await expect(named).rejects.toThrow('(pass --images to summarize images)');
    expect(await collectFiles([join(bed.dir, 'docs', 'chart.png')], { images: true })).toHaveLength(
      1,
    );
  });
});
