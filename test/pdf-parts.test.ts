/**
 * How a PDF is cut when its bytes, not its tokens, are what does not fit a request: scanned
 * pages (a large picture each) go in runs of at most 32 MB a request, and a page larger than a
 * request alone is refused, saying so. The planner alone, with a fleet that knows what a page
 * costs (nothing to count).
 */
import { PDFDocument } from 'pdf-lib';
import { describe, expect, it } from 'vitest';
import type { PartContent, PlanContext } from '../producer/documents/document-plan.ts';
import { DocumentRefusedError } from '../producer/documents/document-refused.ts';
import { pdfParts } from '../producer/documents/pdf-parts.ts';
import { MOST_REQUEST_FILE_BYTES } from '../producer/documents/request-bounds.ts';
import { jpeg } from '../testing/media.ts';

const MB = 1024 * 1024;

/** A "scan": each page one picture of about `mb[i]` MB (a JPEG's header, then bytes that do not compress). */
async function scannedPdf(mb: readonly number[]): Promise<Uint8Array> {
  const doc = await PDFDocument.create();
  for (const [i, size] of mb.entries()) {
    const head = jpeg(1700, 2200);
    const body = Buffer.alloc(Math.floor(size * MB));
    let x = 2_654_435_761 * (i + 1);
    for (let b = 0; b < body.length; b++) {
      x = (Math.imul(x, 1_103_515_245) + 12_345) >>> 0;
      body[b] = x >>> 24;
    }
    // Header, filler, end of image: pdf-lib reads the size from the header and copies the rest.
    const image = await doc.embedJpg(
      Buffer.concat([head.subarray(0, head.length - 2), body, head.subarray(-2)]),
    );
    doc.addPage([612, 792]).drawImage(image, { x: 0, y: 0, width: 612, height: 792 });
  }
  return doc.save();
}

/** A plan's context: no limit on tokens, a page cost known (the learning warm), no counts. */
function context(): PlanContext {
  return {
    model: 'claude-haiku-4-5',
    maxTokens: 256,
    prompt: 'Summarize it.',
    tenant: undefined,
    chunkTokens: undefined,
    room: Number.POSITIVE_INFINITY,
    limitRoom: Number.POSITIVE_INFINITY,
    contextRoom: Number.POSITIVE_INFINITY,
    coster: { count: async () => undefined },
    pages: { perPage: 1_600, warm: true, observations: 20, low: 1_500, high: 1_560 },
    request: (content: PartContent) => ({
      model: 'claude-haiku-4-5',
      max_tokens: 256,
      messages: [{ role: 'user' as const, content: content as never }],
    }),
  };
}

const pdfBytesOf = (content: PartContent) => {
  const block = (content as readonly { source?: { data: string } }[])[0]!;
  return Buffer.from(block.source!.data, 'base64');
};

describe('a PDF too large for one request', () => {
  it('goes in runs of pages of at most 32 MB a request, in order', async () => {
    const pdf = await scannedPdf([9, 9, 9]);
    expect(pdf.length).toBeGreaterThan(MOST_REQUEST_FILE_BYTES);
    const parts = await pdfParts(pdf, context());
    expect(parts.length).toBe(2);
    let pages = 0;
    for (const part of parts) {
      const bytes = pdfBytesOf(part.content);
      expect(bytes.length).toBeLessThanOrEqual(MOST_REQUEST_FILE_BYTES);
      pages += (await PDFDocument.load(bytes)).getPageCount();
    }
    expect(pages).toBe(3);
    expect((parts[1]!.content as readonly { text?: string }[])[1]!.text).toBe(
      'This is page 3 of a document of 3 pages.',
    );
  }, 60_000);

  it('a page larger than a request alone is refused, saying which and why', async () => {
    const pdf = await scannedPdf([1, 25]);
    const err = await pdfParts(pdf, context()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DocumentRefusedError);
    expect((err as DocumentRefusedError).reason).toMatch(
      /^page 2 alone is 25\.\d MB, more than one request holds \(32 MB, about 24 MB of file\): reduce its images' resolution \(a scanned page\) and try again$/,
    );
  }, 60_000);
});
