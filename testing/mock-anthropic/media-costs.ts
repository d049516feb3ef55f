/**
 * What images and PDFs cost the mock, read from their bytes as the API reads them:
 * - an image costs `ceil(width × height / 750)` tokens, after scaling it down (aspect kept) to at
 *   most 1568 pixels on its long edge and 1.15 megapixels (so at most 1,534 tokens); its size is
 *   read from its header (PNG, JPEG, GIF or WebP, as its `media_type` says);
 * - a PDF costs, for each page, 1,500 tokens (the page as an image) plus a third of a token per
 *   byte of the page's content streams (its text and drawing), at most 3,000 a page; the pages are
 *   read with pdf-lib; more than 100 pages in one request is refused, as the API refuses it.
 * Bytes that are not what they claim are a {@link MediaError}: the route answers 400.
 */

import { imageSize } from 'image-size';
import { PDFArray, PDFDocument, PDFStream } from 'pdf-lib';

/** An image or PDF the API would refuse: `field` is its path, `message` the API's words. */
export class MediaError extends Error {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
    this.name = 'MediaError';
  }
}

/** The API's bounds on images: 8000 pixels a side; larger ones are scaled down to these. */
const MAX_IMAGE_SIDE = 8_000;
const SCALED_LONG_EDGE = 1_568;
const SCALED_PIXELS = 1_150_000;
const PIXELS_PER_TOKEN = 750;

/** A page costs at least this (its picture) and at most {@link PAGE_MOST_TOKENS}. */
export const PAGE_BASE_TOKENS = 1_500;
export const PAGE_MOST_TOKENS = 3_000;
/** Bytes of a page's content streams per token above the base. */
const CONTENT_BYTES_PER_TOKEN = 3;
/** The most pages one request may send in its PDFs. */
export const MAX_PDF_PAGES = 100;

const IMAGE_TYPE: Record<string, string> = {
  'image/png': 'png',
  'image/jpeg': 'jpg',
  'image/gif': 'gif',
  'image/webp': 'webp',
};

/** The tokens of an image of `width` × `height` pixels, once scaled as the API scales it. */
export function imagePixelTokens(width: number, height: number): number {
  const scale = Math.min(
    1,
    SCALED_LONG_EDGE / Math.max(width, height),
    Math.sqrt(SCALED_PIXELS / (width * height)),
  );
  const w = Math.max(1, Math.floor(width * scale));
  const h = Math.max(1, Math.floor(height * scale));
  return Math.ceil((w * h) / PIXELS_PER_TOKEN);
}

/**
 * The tokens of a base64 image block's data.
 *
 * @throws MediaError when the bytes are no image, or not of `mediaType`, or too large.
 */
export function imageTokens(mediaType: string, base64: string, field: string): number {
  const bytes = Buffer.from(base64, 'base64');
  let size: { width: number; height: number; type?: string | undefined };
  try {
    size = imageSize(bytes);
  } catch {
    throw new MediaError(field, 'Could not process image');
  }
  const claimed = IMAGE_TYPE[mediaType];
  if (size.type !== claimed) {
    const actual = Object.entries(IMAGE_TYPE).find(([, type]) => type === size.type)?.[0];
    throw new MediaError(
      field,
      actual === undefined
        ? 'Could not process image'
        : `Image does not match the provided media type ${mediaType} (it is ${actual})`,
    );
  }
  if (size.width > MAX_IMAGE_SIDE || size.height > MAX_IMAGE_SIDE) {
    throw new MediaError(
      field,
      `image dimensions exceed max allowed size: ${MAX_IMAGE_SIDE} pixels`,
    );
  }
  if (size.width < 1 || size.height < 1) throw new MediaError(field, 'Could not process image');
  return imagePixelTokens(size.width, size.height);
}

/** What one PDF costs: its pages and their tokens. */
export interface PdfCost {
  readonly pages: number;
  readonly tokens: number;
}

/**
 * The pages of a base64 PDF and their tokens (see the module comment).
 *
 * @throws MediaError when the bytes are not a readable PDF, or it has no page.
 */
export async function pdfCost(base64: string, field: string): Promise<PdfCost> {
  let document: PDFDocument;
  try {
    document = await PDFDocument.load(Buffer.from(base64, 'base64'), { updateMetadata: false });
  } catch {
    throw new MediaError(field, 'The PDF specified was not valid.');
  }
  const pages = document.getPages();
  if (pages.length === 0) throw new MediaError(field, 'The PDF specified has no pages.');
  let tokens = 0;
  for (const page of pages) {
    const extra = Math.ceil(contentBytes(page.node.Contents()) / CONTENT_BYTES_PER_TOKEN);
    tokens += Math.min(PAGE_MOST_TOKENS, PAGE_BASE_TOKENS + extra);
  }
  return { pages: pages.length, tokens };
}

/** The bytes of a page's content streams, as stored (one stream or an array of them). */
function contentBytes(contents: PDFStream | PDFArray | undefined): number {
  if (contents instanceof PDFStream) return contents.getContentsSize();
  if (!(contents instanceof PDFArray)) return 0;
  let bytes = 0;
  for (let i = 0; i < contents.size(); i++) {
    const stream = contents.lookup(i);
    if (stream instanceof PDFStream) bytes += stream.getContentsSize();
  }
  return bytes;
}
