import { inflateSync, constants as zlib } from 'node:zlib';
import { imageSize } from 'image-size';

/**
 * What llmq reserves for an image or a document block, read from its bytes and erring high (the
 * estimate learning brings it down to what the provider counts):
 * - a PDF: {@link PDF_PAGE_TOKENS} a page (the most the API charges a page), its pages counted
 *   by a light scan of the file (page objects, also inside compressed object streams), never by
 *   parsing it whole;
 * - a text document: its text;
 * - an image: `width × height / 750` tokens after the API's scaling (long edge 1568 px, at most
 *   1.15 megapixels), its size read from its header (PNG, JPEG, GIF, WebP), plus a twentieth;
 *   {@link IMAGE_MOST_TOKENS} when the header cannot be read.
 * A source llmq cannot read (a URL, a file id) reserves {@link UNREAD_DOCUMENT_TOKENS}.
 */

/** The most the API charges a PDF page (text plus the page as an image). */
export const PDF_PAGE_TOKENS = 3_000;
/** The most an image costs once scaled. */
export const IMAGE_MOST_TOKENS = 1_600;
/** A document whose bytes llmq does not have: ten pages at most cost. */
export const UNREAD_DOCUMENT_TOKENS = 10 * PDF_PAGE_TOKENS;
/** The API reads at most this many pages a request. */
const MOST_PAGES = 100;
/** Bytes of an unreadable PDF taken as a page (a text page is 2–5 KB). */
const BYTES_PER_UNREAD_PAGE = 3_000;

const PAGE_OBJECT = /\/Type\s*\/Page(?![A-Za-z])/g;
const OBJECT_STREAM = /\/Type\s*\/ObjStm\b[\s\S]*?stream\r?\n/g;

/** The page objects in a PDF's text (an older copy left by an incremental update counts too). */
function scanPages(text: string): number {
  let objects = 0;
  for (const _ of text.matchAll(PAGE_OBJECT)) objects++;
  return objects;
}

/**
 * The pages of a PDF, read lightly: its page objects, in the file and in its compressed object
 * streams (where pdf-lib and many writers put them). Undefined when none is found (encrypted, or
 * not a PDF).
 */
export function countPdfPages(bytes: Buffer): number | undefined {
  const text = bytes.toString('latin1');
  let pages = scanPages(text);
  for (const m of text.matchAll(OBJECT_STREAM)) {
    const start = (m.index ?? 0) + m[0].length;
    const end = text.indexOf('endstream', start);
    if (end < 0) continue;
    try {
      const inner = inflateSync(bytes.subarray(start, end), { finishFlush: zlib.Z_SYNC_FLUSH });
      pages += scanPages(inner.toString('latin1'));
    } catch {
      // Not Flate, or encrypted: what the rest of the file shows stands.
    }
  }
  return pages > 0 ? pages : undefined;
}

/** The pages reserved for a base64 PDF: those counted, or its bytes' worth when none is found. */
export function estimatePdfPages(base64: string): number {
  const bytes = Buffer.from(base64, 'base64');
  return (
    countPdfPages(bytes) ??
    Math.min(MOST_PAGES, Math.max(1, Math.ceil(bytes.length / BYTES_PER_UNREAD_PAGE)))
  );
}

/** The tokens of an image of `width` × `height` pixels once the API scales it. */
function scaledImageTokens(width: number, height: number): number {
  const scale = Math.min(
    1,
    1568 / Math.max(width, height),
    Math.sqrt(1_150_000 / (width * height)),
  );
  const pixels = Math.max(1, Math.floor(width * scale)) * Math.max(1, Math.floor(height * scale));
  return Math.ceil(pixels / 750);
}

/** Bytes of an image's start that hold its size (a JPEG's frame header may follow its EXIF). */
const HEADER_BYTES = 128 * 1024;

/** Tokens reserved for a base64 image, from the size in its header. */
export function estimateImageTokens(base64: string): number {
  const head = Buffer.from(base64.slice(0, Math.ceil(HEADER_BYTES / 3) * 4), 'base64');
  try {
    const { width, height } = imageSize(head);
    if (!(width > 0 && height > 0)) return IMAGE_MOST_TOKENS;
    return Math.min(IMAGE_MOST_TOKENS, Math.ceil(scaledImageTokens(width, height) * 1.05));
  } catch {
    return IMAGE_MOST_TOKENS;
  }
}

type Source = Record<string, unknown>;

/** The text of a text document (its data, or its content blocks' texts). */
function documentText(source: Source): string | undefined {
  if (source['type'] === 'text' && typeof source['data'] === 'string') return source['data'];
  if (source['type'] !== 'content') return undefined;
  const content = source['content'];
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return undefined;
  return content
    .map((b) =>
      typeof (b as Source)?.['text'] === 'string' ? ((b as Source)['text'] as string) : '',
    )
    .join('\n');
}

/** What an image or document block is reserved. */
export interface MediaEstimate {
  /** Tokens for its media (its image, its PDF's pages at {@link PDF_PAGE_TOKENS} each). */
  readonly tokens: number;
  /** Text to count as text (a text document's body, a document's title and context). */
  readonly text: string;
  /** The PDF pages among `tokens` (0 for an image, a text document or an unread source). */
  readonly pdfPages: number;
}

/** What an image or document block is reserved (see the module comment). */
export function estimateMediaBlock(block: Source): MediaEstimate {
  const source = (block['source'] ?? {}) as Source;
  const base64 = source['type'] === 'base64' && typeof source['data'] === 'string';
  if (block['type'] === 'image') {
    return {
      tokens: base64 ? estimateImageTokens(source['data'] as string) : IMAGE_MOST_TOKENS,
      text: '',
      pdfPages: 0,
    };
  }
  const around = [block['title'], block['context']].filter((t) => typeof t === 'string').join('\n');
  const body = documentText(source);
  if (body !== undefined) return { tokens: 0, text: `${around}\n${body}`, pdfPages: 0 };
  if (!base64) return { tokens: UNREAD_DOCUMENT_TOKENS, text: around, pdfPages: 0 };
  const pdfPages = estimatePdfPages(source['data'] as string);
  return { tokens: pdfPages * PDF_PAGE_TOKENS, text: around, pdfPages };
}
