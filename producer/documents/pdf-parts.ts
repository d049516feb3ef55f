import {
  type ContentBlock,
  guessInput,
  type PlanContext,
  type PlannedPart,
} from './document-plan.ts';
import { DocumentRefusedError } from './document-refused.ts';
import { type PdfFile, readPdf } from './pdf-file.ts';
import { MOST_REQUEST_FILE_BYTES } from './request-bounds.ts';

/** The API reads at most this many PDF pages a request. */
const MOST_PAGES = 100;
/**
 * Parts are aimed at this share of a call's room, so that a stretch of denser pages than the
 * document's average still fits and the part need not be cut again.
 */
const PART_FILL = 0.9;

/**
 * A PDF's calls: the whole file when it fits one call, else runs of its pages, each a PDF of
 * its own (pdf-lib), cut so that each fits the room (tokens), a request (32 MB) and the API's
 * 100 pages. Where llmq's guess decides (the learning is cold, or the guess does not fit), the
 * provider counts (within the fleet's budget for it), and a counted part is reserved as counted.
 */
export async function pdfParts(bytes: Uint8Array, ctx: PlanContext): Promise<PlannedPart[]> {
  const pdf = await readPdf(bytes);
  return fitRun({ pdf, from: 1, to: pdf.pages }, ctx);
}

/** Pages `from` to `to` (1-based, inclusive) of a PDF. */
interface PageRun {
  readonly pdf: PdfFile;
  readonly from: number;
  readonly to: number;
}

/** A run of pages as calls that each fit. */
async function fitRun(run: PageRun, ctx: PlanContext): Promise<PlannedPart[]> {
  const { pdf, from, to } = run;
  const pages = to - from + 1;
  if (pages > MOST_PAGES) return cutInto(Math.ceil(pages / MOST_PAGES), run, ctx);
  const part = await pdf.range(from, to);
  if (part.length > MOST_REQUEST_FILE_BYTES) {
    if (pages === 1) throw new DocumentRefusedError(pageTooLarge(from, part.length));
    return cutInto(2, run, ctx);
  }
  const content = contentOf(part, from, to, pdf.pages);
  const request = ctx.request(content);
  const guess = guessInput(request, ctx);
  if (guess <= ctx.room && ctx.pages.warm) return [{ content }];
  // The guess decides: the provider's own count, when the budget allows.
  const counted = await ctx.coster.count(request, { tenant: ctx.tenant, pdfPages: pages });
  const cost = counted ?? guess;
  if (cost <= ctx.room) return [{ content, counted }];
  if (pages === 1) throw new DocumentRefusedError(pageTooLong(from, cost, ctx.room));
  return cutInto(Math.max(2, Math.ceil(cost / (PART_FILL * ctx.room))), run, ctx);
}

/** A run of pages in `n` runs of (nearly) equal length, each fitted. */
async function cutInto(n: number, run: PageRun, ctx: PlanContext): Promise<PlannedPart[]> {
  const { pdf, from, to } = run;
  const pages = to - from + 1;
  const runs = Math.min(n, pages);
  const out: PlannedPart[] = [];
  let start = from;
  for (let i = 0; i < runs; i++) {
    const length = Math.floor(pages / runs) + (i < pages % runs ? 1 : 0);
    out.push(...(await fitRun({ pdf, from: start, to: start + length - 1 }, ctx)));
    start += length;
  }
  return out;
}

/** A PDF's bytes as a document block. */
export function pdfBlock(bytes: Uint8Array): ContentBlock {
  const data = Buffer.from(bytes).toString('base64');
  return { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data } };
}

/** The user message of a run of pages: the PDF, and which pages of how many it holds. */
function contentOf(part: Uint8Array, from: number, to: number, total: number): ContentBlock[] {
  const document = pdfBlock(part);
  if (from === 1 && to === total) return [document];
  const which = from === to ? `page ${from}` : `pages ${from} to ${to}`;
  return [document, { type: 'text', text: `This is ${which} of a document of ${total} pages.` }];
}

function pageTooLarge(page: number, bytes: number): string {
  const mb = (bytes / 1024 / 1024).toFixed(1);
  return `page ${page} alone is ${mb} MB, more than one request holds (32 MB, about 24 MB of file): reduce its images' resolution (a scanned page) and try again`;
}

function pageTooLong(page: number, cost: number, room: number): string {
  return `page ${page} alone needs ${cost} input tokens, more than one call may hold under the limits (${Math.floor(room)}): raise the input limit to at least ${cost}`;
}
