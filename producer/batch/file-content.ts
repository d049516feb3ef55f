import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { extname } from 'node:path';
import { imageSize } from 'image-size';

/** The image formats the API reads, by the type image-size names them. */
const IMAGE_MEDIA_TYPES: Readonly<Record<string, string>> = {
  png: 'image/png',
  jpg: 'image/jpeg',
  gif: 'image/gif',
  webp: 'image/webp',
};

/** A request's body may be up to 32 MB; base64 makes a file a third larger. */
const MOST_FILE_BYTES = Math.floor(((32 * 1024 * 1024 - 64 * 1024) * 3) / 4);

/** A file as a batch sends it: text to summarize (and split), or one PDF or image block. */
export type FileContent =
  | { readonly kind: 'text'; readonly text: string }
  | {
      readonly kind: 'block';
      /** The document or image block the user message carries. */
      readonly block: Record<string, unknown>;
      /** Stands for the bytes in the idempotency key: their type and hash. */
      readonly fingerprint: string;
    }
  /** A file the API would refuse (too large, no image): written as its error, not sent. */
  | { readonly kind: 'invalid'; readonly fingerprint: string; readonly reason: string }
  | { readonly kind: 'empty' };

/**
 * Reads a file of a batch: `.txt` and `.md` as UTF-8 text, `.pdf` as a document block, an image
 * as an image block (its type read from its bytes: PNG, JPEG, GIF or WebP). Blank files are
 * `empty`; a PDF or image too large for one request, or an image file that is no image the API
 * reads, is `invalid`.
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
  if (bytes.length > MOST_FILE_BYTES) {
    const mb = (bytes.length / 1024 / 1024).toFixed(1);
    const reason = `${file} is ${mb} MB: a request holds at most 32 MB (a file of about 24 MB); split it`;
    return { kind: 'invalid', fingerprint: `file:${hash}`, reason };
  }
  const data = bytes.toString('base64');
  if (extension === '.pdf') {
    const source = { type: 'base64', media_type: 'application/pdf', data };
    return { kind: 'block', block: { type: 'document', source }, fingerprint: `pdf:${hash}` };
  }
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
