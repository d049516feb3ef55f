import type { PDFDocument } from 'pdf-lib';
import { DocumentRefusedError } from './document-refused.ts';

/** A PDF read with pdf-lib: its pages, and any run of them as a PDF of its own. */
export interface PdfFile {
  readonly pages: number;
  readonly bytes: number;
  /**
   * Pages `from` to `to` (1-based, inclusive) as a PDF of their own (the whole file as it is).
   * @throws DocumentRefusedError when the pages cannot be copied (a damaged file)
   */
  range(from: number, to: number): Promise<Uint8Array>;
}

/**
 * Reads a PDF's structure (pdf-lib; nothing is rendered).
 * @throws DocumentRefusedError for an encrypted PDF, one that cannot be parsed, one without
 *   pages, saying so and what to do
 */
export async function readPdf(bytes: Uint8Array): Promise<PdfFile> {
  // Loaded when a PDF is read: every producer imports this module, few read PDFs.
  const { PDFDocument } = await import('pdf-lib');
  let doc: PDFDocument;
  let pages: number;
  try {
    // Loaded even when encrypted, to say so rather than that it cannot be read.
    doc = await PDFDocument.load(bytes, { updateMetadata: false, ignoreEncryption: true });
    if (doc.isEncrypted) throw new DocumentRefusedError(ENCRYPTED);
    pages = doc.getPageCount();
  } catch (err) {
    throw err instanceof DocumentRefusedError ? err : unreadable(err);
  }
  if (pages === 0) throw new DocumentRefusedError('has no pages');
  return {
    pages,
    bytes: bytes.length,
    async range(from, to) {
      if (from === 1 && to === pages) return bytes;
      try {
        const part = await PDFDocument.create({ updateMetadata: false });
        const indices = Array.from({ length: to - from + 1 }, (_, i) => from - 1 + i);
        for (const page of await part.copyPages(doc, indices)) part.addPage(page);
        return await part.save();
      } catch (err) {
        throw unreadable(err);
      }
    },
  };
}

const ENCRYPTED =
  'is encrypted (password-protected), and the API reads no encrypted PDF: save a copy without the password';

function unreadable(err: unknown): DocumentRefusedError {
  // pdf-lib's parse errors say where; a structure it cannot walk fails as a TypeError.
  const detail =
    err instanceof TypeError
      ? 'its structure is damaged'
      : String((err as Error)?.message ?? err)
          .split('\n')[0]!
          .slice(0, 160);
  return new DocumentRefusedError(
    `cannot be read as a PDF (${detail}): open it and export it as PDF again`,
  );
}
