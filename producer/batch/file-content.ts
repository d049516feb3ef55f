import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { extname } from 'node:path';
import { imageSize } from 'image-size';
import type { ContentBlock } from '../documents/document-plan.ts';
import { MOST_REQUEST_FILE_BYTES } from '../documents/request-bounds.ts';

/** The image formats the API reads, by the type image-size names them. */
const IMAGE_MEDIA_TYPES: Readonly<Record<string, string>> = {
  png: 'image/png',
  jpg: 'image/jpeg',
  gif: 'image/gif',
  webp: 'image/webp',
};

/** The most bytes of a PDF a batch reads (it is sent in parts of at most 32 MB each). */
const MOST_PDF_BYTES = 1024 * 1024 * 1024;

/** A file as a batch sends it: text or a PDF to summarize (in parts when long), or an image. */
export type FileContent =
  | { readonly kind: 'text'; readonly text: string }
  | {
      readonly kind: 'pdf';
      readonly bytes: Uint8Array;
      /** Stands for the bytes in the idempotency key: their type and hash. */
      readonly fingerprint: string;
    }
  | {
      readonly kind: 'block';
      /** The image block the user message carries. */
      readonly block: ContentBlock;
      /** Stands for the bytes in the idempotency key: their type and hash. */
      readonly fingerprint: string;
    }
  /** A file the API would refuse (too large, no image): written as its error, not sent. */
  | { readonly kind: 'invalid'; readonly fingerprint: string; readonly reason: string }
  | { readonly kind: 'empty' };

/**
 * Reads a file of a batch: `.txt` and `.md` as UTF-8 text, `.pdf` as its bytes (read and cut
 * into parts when it is sent), an image as an image block (its type read from its bytes: PNG,
 * JPEG, GIF or WebP). Blank files are `empty`; an image too large for one request, a PDF above
 * a gigabyte, or an image file that is no image the API reads, is `invalid`.
 */
export async function readFileContent(file: string): Promise<FileContent> {
  const extension = extname(file).toLowerCase();
  if (extension === '.txt' || extension === '.md') {
    const text = await readFile(file, 'utf8');
    return text.trim() === '' ? { kind: 'empty' } : { kind: 'text', text };
  }
  const bytes = await readFile(file);
  if (bytes.length === 0) return { kind: 'empty' };
  const hash = createHash('sha256').update(bytes).digest('hex');
  const mb = (bytes.length / 1024 / 1024).toFixed(1);
  if (extension === '.pdf') {
    if (bytes.length <= MOST_PDF_BYTES) return { kind: 'pdf', bytes, fingerprint: `pdf:${hash}` };
    const reason = `${file} is ${mb} MB: a batch reads PDFs of at most 1 GB; split it`;
    return { kind: 'invalid', fingerprint: `file:${hash}`, reason };
  }
  if (bytes.length > MOST_REQUEST_FILE_BYTES) {
    const reason = `${file} is ${mb} MB: a request holds at most 32 MB (an image of about 24 MB); make it smaller`;
    return { kind: 'invalid', fingerprint: `file:${hash}`, reason };
  }
  const data = bytes.toString('base64');
  const mediaType = imageMediaType(bytes);
  if (mediaType === undefined) {
    const reason = `${file} is not a PNG, JPEG, GIF or WebP image (the formats the API reads)`;
    return { kind: 'invalid', fingerprint: `file:${hash}`, reason };
  }
  const source = { type: 'base64', media_type: mediaType, data };
  return { kind: 'block', block: { type: 'image', source }, fingerprint: `${mediaType}:${hash}` };
}

function imageMediaType(bytes: Buffer): string | undefined {
  try {
    return IMAGE_MEDIA_TYPES[imageSize(bytes).type ?? ''];
  } catch {
    return undefined;
  }
}
