import { EncryptedPDFError, PDFDocument } from 'pdf-lib';

/** A PDF read with pdf-lib: its pages, and any run of them as a PDF of its own. */
export interface PdfFile {
  readonly pages: number;
  readonly bytes: number;
  /** Pages `from` to `to` (1-based, inclusive) as a PDF of their own (the whole file as it is). */
  range(from: number, to: number): Promise<Uint8Array>;
}

/** Why a PDF cannot be sent: a sentence to put after its name. */
export type PdfProblem = { readonly problem: string };

/**
 * Reads a PDF's structure (pdf-lib; nothing is rendered). An encrypted one, one that cannot be
 * parsed and one without pages are a {@link PdfProblem} saying so and what to do.
 */
export async function readPdf(bytes: Uint8Array): Promise<PdfFile | PdfProblem> {
  let doc: PDFDocument;
  try {
    doc = await PDFDocument.load(bytes, { updateMetadata: false });
  } catch (err) {
    if (err instanceof EncryptedPDFError) return encrypted;
    const detail = (err as Error).message.split('\n')[0]!.slice(0, 160);
    return {
      problem: `cannot be read as a PDF (${detail}): open it and export it as PDF again`,
    };
  }
  if (doc.isEncrypted) return encrypted;
  const pages = doc.getPageCount();
  if (pages === 0) return { problem: 'has no pages' };
  return {
    pages,
    bytes: bytes.length,
    async range(from, to) {
      if (from === 1 && to === pages) return bytes;
      const part = await PDFDocument.create({ updateMetadata: false });
      const indices = Array.from({ length: to - from + 1 }, (_, i) => from - 1 + i);
      for (const page of await part.copyPages(doc, indices)) part.addPage(page);
      return part.save();
    },
  };
}

const encrypted: PdfProblem = {
  problem:
    'is encrypted (password-protected), and the API reads no encrypted PDF: save a copy without the password',
};

export const isPdfProblem = (v: PdfFile | PdfProblem): v is PdfProblem => 'problem' in v;
