/**
 * The input tokens of a Messages request, block by block in the order the prompt cache reads
 * them (tools, then system, then messages), so a prefix up to any block can be counted.
 *
 * A request counts `REQUEST_BASE_TOKENS`; each tool `TOOL_OVERHEAD_TOKENS` and the text of its
 * JSON (without `cache_control`); the system text; each message `MESSAGE_OVERHEAD_TOKENS` and its
 * blocks: text by the tokenizer, images and PDFs by media-costs.ts, text documents as their text
 * (and title and context). With {@link InputCounting}'s `charsPerToken`, the texts count
 * `ceil(characters / charsPerToken)` together plus `perMessageTokens` a message instead (images
 * and PDFs cost the same either way).
 */

import { RequestValidationError } from '../../shared/errors.ts';
import type { ContentBlock, DocumentBlock } from './content-blocks.ts';
import { imageTokens, MAX_PDF_PAGES, MediaError, type PdfCost, pdfCost } from './media-costs.ts';
import {
  type CountTokensRequest,
  countTokensRequestSchema,
  describeIssue,
  firstIssue,
} from './request-schema.ts';
import {
  countTextTokens,
  type InputCounting,
  MESSAGE_OVERHEAD_TOKENS,
  REQUEST_BASE_TOKENS,
  TOOL_OVERHEAD_TOKENS,
} from './tokenizer.ts';

/** One block of the prompt, as counted and as the cache keys it. */
export interface Segment {
  /** Tokens of its text under the tokenizer, overheads included. */
  readonly textTokens: number;
  /** Characters of its text, for `charsPerToken`. */
  readonly chars: number;
  /** Tokens of its images and PDFs. */
  readonly mediaTokens: number;
  /** Whether it opens a message (which costs `perMessageTokens` under `charsPerToken`). */
  readonly startsMessage: boolean;
  /** Its `cache_control` lifetime when it marks a breakpoint. */
  readonly breakpoint: '5m' | '1h' | undefined;
  /** What it is (its place and content), for the cache's key. */
  readonly key: string;
}

/** PDF costs by the path of their data, read before the segments are built. */
type PdfCosts = ReadonlyMap<string, PdfCost>;

/**
 * The segments of a validated request, its PDFs read with pdf-lib.
 *
 * @throws MediaError for an image or PDF the API would refuse.
 */
export async function measureRequest(request: CountTokensRequest): Promise<Segment[]> {
  const costs = new Map<string, PdfCost>();
  for (const [field, data] of pdfsOf(request)) costs.set(field, await pdfCost(data, field));
  const pages = [...costs.values()].reduce((sum, cost) => sum + cost.pages, 0);
  if (pages > MAX_PDF_PAGES) {
    const field = [...costs.keys()].at(-1) ?? 'messages';
    throw new MediaError(field, `A maximum of ${MAX_PDF_PAGES} PDF pages may be provided.`);
  }
  return segmentsOf(request, costs);
}

/** The tokens of `segments[0..upTo)` (all of them by default) under `counting`. */
export function tokensOf(
  segments: readonly Segment[],
  counting: InputCounting = {},
  upTo = segments.length,
): number {
  let text = 0;
  let chars = 0;
  let media = 0;
  let messages = 0;
  for (let i = 0; i < upTo; i++) {
    const segment = segments[i]!;
    text += segment.textTokens;
    chars += segment.chars;
    media += segment.mediaTokens;
    if (segment.startsMessage) messages++;
  }
  if (counting.charsPerToken === undefined) return REQUEST_BASE_TOKENS + text + media;
  const perMessage = counting.perMessageTokens ?? MESSAGE_OVERHEAD_TOKENS;
  return Math.ceil(chars / counting.charsPerToken) + perMessage * messages + media;
}

/** Input tokens of a validated request (system + messages + tools, images and PDFs included). */
export async function countRequestTokens(
  request: CountTokensRequest,
  counting: InputCounting = {},
): Promise<number> {
  return tokensOf(await measureRequest(request), counting);
}

/**
 * A `count_tokens` body's answer: its input tokens, or the 400 message (a bad field, image or
 * PDF) and the 404 of a model that is not Claude's.
 */
export async function countTokensAnswer(
  body: unknown,
  counting: InputCounting,
): Promise<
  { tokens: number } | { refused: 'invalid_request_error' | 'not_found_error'; message: string }
> {
  const parsed = countTokensRequestSchema.safeParse(body);
  if (!parsed.success) {
    return {
      refused: 'invalid_request_error',
      message: describeIssue(firstIssue(parsed.error.issues)),
    };
  }
  if (!parsed.data.model.includes('claude-')) {
    return { refused: 'not_found_error', message: `model: ${parsed.data.model}` };
  }
  try {
    return { tokens: await countRequestTokens(parsed.data, counting) };
  } catch (error) {
    if (!(error instanceof MediaError)) throw error;
    return { refused: 'invalid_request_error', message: error.message };
  }
}

/**
 * The mock's input-token count for a Messages request body (the `input_tokens` it will report and
 * charge). `max_tokens` is not needed. A base64 PDF is read only by the server: count such a
 * request with `POST /v1/messages/count_tokens`.
 *
 * @throws RequestValidationError when the body is not a valid Messages request (or holds a PDF or
 *   an image the API would refuse), naming the field the way the mock's 400 would.
 */
export function countMockTokens(request: unknown, counting: InputCounting = {}): number {
  const parsed = countTokensRequestSchema.safeParse(request);
  if (!parsed.success) {
    throw new RequestValidationError([firstIssue(parsed.error.issues)], 'invalid Messages request');
  }
  const pdf = pdfsOf(parsed.data)[0];
  if (pdf) {
    throw new RequestValidationError(
      [{ field: pdf[0], message: 'a PDF is counted by the server: ask its count_tokens' }],
      'countMockTokens reads no PDFs',
    );
  }
  try {
    return tokensOf(segmentsOf(parsed.data, new Map()), counting);
  } catch (error) {
    if (!(error instanceof MediaError)) throw error;
    throw new RequestValidationError([{ field: error.field, message: error.message }]);
  }
}

/** The base64 PDFs of a request: the path of each one's data, and the data. */
function pdfsOf(request: CountTokensRequest): [string, string][] {
  const found: [string, string][] = [];
  request.messages.forEach((message, m) => {
    if (typeof message.content === 'string') return;
    message.content.forEach((block, b) => {
      if (block.type === 'document' && block.source.type === 'base64') {
        found.push([`messages.${m}.content.${b}.source.data`, block.source.data]);
      }
    });
  });
  return found;
}

function ttlOf(block: { cache_control?: { ttl?: '5m' | '1h' | undefined } | null | undefined }) {
  return block.cache_control ? (block.cache_control.ttl ?? '5m') : undefined;
}

/** The block without its breakpoint: moving `cache_control` does not change what is cached. */
function withoutCacheControl(block: object): string {
  const { cache_control: _, ...rest } = block as Record<string, unknown>;
  return JSON.stringify(rest);
}

function textSegment(text: string, key: string, extra = 0): Omit<Segment, 'breakpoint'> {
  return {
    textTokens: countTextTokens(text) + extra,
    chars: [...text].length,
    mediaTokens: 0,
    startsMessage: false,
    key,
  };
}

/** The segments of a validated request, with its PDFs' costs already read. */
function segmentsOf(request: CountTokensRequest, pdfs: PdfCosts): Segment[] {
  const segments: Segment[] = [];
  for (const tool of request.tools ?? []) {
    const json = withoutCacheControl(tool);
    segments.push({
      ...textSegment(json, `tool:${json}`, TOOL_OVERHEAD_TOKENS),
      breakpoint: ttlOf(tool),
    });
  }
  if (typeof request.system === 'string') {
    segments.push({
      ...textSegment(request.system, `system:${request.system}`),
      breakpoint: undefined,
    });
  } else {
    for (const block of request.system ?? []) {
      const key = `system:${withoutCacheControl(block)}`;
      segments.push({ ...textSegment(block.text, key), breakpoint: ttlOf(block) });
    }
  }
  request.messages.forEach((message, m) => {
    const blocks = typeof message.content === 'string' ? [message.content] : message.content;
    const first = segments.length;
    blocks.forEach((block, b) => {
      const field = `messages.${m}.content.${b}`;
      segments.push(blockSegment(block, `${message.role}:`, field, pdfs));
    });
    if (segments.length === first)
      segments.push({ ...textSegment('', `${message.role}:`), breakpoint: undefined });
    const opening = segments[first]!;
    segments[first] = {
      ...opening,
      textTokens: opening.textTokens + MESSAGE_OVERHEAD_TOKENS,
      startsMessage: true,
      key: `turn|${opening.key}`,
    };
  });
  return segments;
}

/** One block of a message's content. */
function blockSegment(
  block: string | ContentBlock,
  role: string,
  field: string,
  pdfs: PdfCosts,
): Segment {
  if (typeof block === 'string')
    return { ...textSegment(block, role + block), breakpoint: undefined };
  const key = role + withoutCacheControl(block);
  const breakpoint = ttlOf(block);
  if (block.type === 'text') return { ...textSegment(block.text, key), breakpoint };
  if (block.type === 'document') return { ...documentSegment(block, key, field, pdfs), breakpoint };
  if (block.source.type === 'url') throw cannotFetch(`${field}.source.url`);
  const mediaTokens = imageTokens(
    block.source.media_type,
    block.source.data,
    `${field}.source.data`,
  );
  return { ...textSegment('', key), mediaTokens, breakpoint };
}

function documentSegment(
  block: DocumentBlock,
  key: string,
  field: string,
  pdfs: PdfCosts,
): Omit<Segment, 'breakpoint'> {
  const { source } = block;
  if (source.type === 'url') throw cannotFetch(`${field}.source.url`);
  const around = [block.title, block.context].filter((t): t is string => typeof t === 'string');
  if (source.type === 'base64') {
    const cost = pdfs.get(`${field}.source.data`);
    if (!cost) throw new MediaError(`${field}.source.data`, 'The PDF specified was not read.');
    return { ...textSegment(around.join('\n'), key), mediaTokens: cost.tokens };
  }
  const body =
    source.type === 'text'
      ? source.data
      : typeof source.content === 'string'
        ? source.content
        : source.content.map((b) => b.text).join('\n');
  return textSegment([...around, body].join('\n'), key);
}

function cannotFetch(field: string): MediaError {
  return new MediaError(field, 'the mock fetches no URLs: send the file as base64 data');
}
