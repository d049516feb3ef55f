/**
 * PDFs and images costed from their bytes on llmq's side: what a job reserves is at least what
 * the provider (the mock, which reads them with its own parser) charges, so a PDF workload draws
 * no 429.
 */
import { randomBytes } from 'node:crypto';
import Anthropic from '@anthropic-ai/sdk';
import { PDFDocument } from 'pdf-lib';
import { describe, expect, it } from 'vitest';
import { estimateInputTokens } from '../shared/estimate.ts';
import { countPdfPages, PDF_PAGE_TOKENS } from '../shared/media-estimate.ts';
import type { MessagesRequest } from '../shared/request.ts';
import { gif, imageBlock, jpeg, makePdf, pdfBlock, png, webp } from '../testing/media.ts';
import { eachTestMocks } from './fixtures/mock-servers.ts';
import { allCompleted, poolsPerTest } from './fixtures/worker-harness.ts';

const start = eachTestMocks();
const openTestPool = poolsPerTest();

type Block = { type: string; [field: string]: unknown };
const ask = (content: Block[]): MessagesRequest => ({
  model: 'claude-mock-1',
  max_tokens: 50,
  messages: [{ role: 'user', content: [...content, { type: 'text', text: 'Summarize it.' }] }],
});

/** A PDF of `pages` pages padded with an attachment of random bytes to about `kb` KB. */
async function paddedPdf(pages: number, lines: number, kb: number, seed: number) {
  const doc = await PDFDocument.load(await makePdf(pages, lines, seed));
  const size = (await doc.save()).length;
  const pad = Math.max(0, kb * 1024 - size - 600);
  if (pad > 0)
    await doc.attach(randomBytes(pad), 'padding.bin', { mimeType: 'application/octet-stream' });
  return doc.save();
}

describe('the estimate of documents and images', () => {
  it('reserves a 30-page PDF at least what the provider charges for it', async () => {
    const mock = await start();
    const client = new Anthropic({ apiKey: 'k', baseURL: mock.url, maxRetries: 0 });
    for (const lines of [0, 20, 50]) {
      const request = ask([pdfBlock(await makePdf(30, lines))]);
      const charged = (
        await client.messages.countTokens(request as Anthropic.MessageCountTokensParams)
      ).input_tokens;
      const reserved = estimateInputTokens(request);
      expect(reserved).toBeGreaterThanOrEqual(charged);
      // Erring high, not blindly: at most the most a page costs, and a little text.
      expect(reserved).toBeLessThan(30 * PDF_PAGE_TOKENS + 100);
    }
  });

  it('reserves images and text documents at least what the provider charges', async () => {
    const mock = await start();
    const client = new Anthropic({ apiKey: 'k', baseURL: mock.url, maxRetries: 0 });
    const text = 'Quarterly figures: revenue rose 12% while costs fell 3%. '.repeat(200);
    for (const block of [
      imageBlock(png(800, 600), 'image/png'),
      imageBlock(jpeg(4000, 3000), 'image/jpeg'),
      imageBlock(gif(64, 64), 'image/gif'),
      imageBlock(webp(1920, 1080), 'image/webp'),
      { type: 'document', source: { type: 'text', media_type: 'text/plain', data: text } },
    ]) {
      const request = ask([block]);
      const charged = (
        await client.messages.countTokens(request as Anthropic.MessageCountTokensParams)
      ).input_tokens;
      expect(estimateInputTokens(request)).toBeGreaterThanOrEqual(charged);
      expect(estimateInputTokens(request)).toBeLessThan(charged * 1.5 + 100);
    }
  });

  it('counts pages without parsing the file, compressed object streams or not', async () => {
    for (const pages of [1, 7, 30]) {
      const doc = await PDFDocument.load(await makePdf(pages, 5));
      expect(countPdfPages(Buffer.from(await doc.save()))).toBe(pages);
      expect(countPdfPages(Buffer.from(await doc.save({ useObjectStreams: false })))).toBe(pages);
    }
    expect(countPdfPages(Buffer.from('no PDF at all'))).toBeUndefined();
  });

  it('lets a worker run 30 PDF jobs of 5-120 KB under 40,000 input tokens per 10 s with no 429', async () => {
    const limits = { inputTokens: 40_000 };
    const pool = await openTestPool('pdfjobs', {
      windowMs: 10_000,
      limits,
      latencyMs: 300,
      roundReadings: 1_000,
    });
    const ids: string[] = [];
    const sizes: number[] = [];
    for (let i = 0; i < 30; i++) {
      const kb = 5 + Math.round((115 * i) / 29);
      const bytes = await paddedPdf(1 + (i % 3), (i * 7) % 25, kb, i);
      sizes.push(bytes.length);
      ids.push(await pool.producer.enqueue(ask([pdfBlock(bytes)]), { priority: 'batch' }));
    }
    expect(Math.min(...sizes)).toBeLessThan(8 * 1024);
    expect(Math.max(...sizes)).toBeGreaterThan(110 * 1024);
    await pool.worker({ concurrency: 30, limiter: { windowMs: 10_000, limits } });
    await allCompleted(pool, ids, 120_000);
    const stats = pool.mock.stats();
    expect(stats.rateLimited.input_tokens).toBe(0);
    expect(stats.responses['429'] ?? 0).toBe(0);
    expect(stats.admitted).toBe(30);
    expect(stats.worstWindow.input_tokens).toBeLessThanOrEqual(40_000);
  }, 150_000);
});
