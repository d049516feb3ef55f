import { estimateMediaBlock } from './media-estimate.ts';
import type { MessagesRequest } from './request.ts';

/**
 * What one call may spend, per dimension. Total tokens are derived (input + output).
 */
export interface Cost {
  readonly requests: number;
  readonly inputTokens: number;
  readonly outputTokens: number;
}

/**
 * The version of this costing code (this file, media-estimate.ts, prompt-cache.ts): a ticket
 * says which one costed it. Bump it when the arithmetic changes.
 */
export const ESTIMATE_VERSION = 1;

const PER_MESSAGE_TOKENS = 8;
const BASE_TOKENS = 16;

const utf8 = new TextEncoder();
const bytes = (s: string) => utf8.encode(s).length;

/** A text's tokens as the estimate counts them: one per three bytes of UTF-8, rounded up. */
export function estimateTextTokens(text: string): number {
  return Math.ceil(bytes(text) / 3);
}

interface BlockSize {
  readonly bytes: number;
  readonly media: number;
  readonly pdfPages: number;
}

function blockBytes(block: unknown): BlockSize {
  if (typeof block === 'string') return { bytes: bytes(block), media: 0, pdfPages: 0 };
  if (block === null || typeof block !== 'object') return { bytes: 0, media: 0, pdfPages: 0 };
  const b = block as Record<string, unknown>;
  if (b['type'] === 'text' && typeof b['text'] === 'string')
    return { bytes: bytes(b['text']), media: 0, pdfPages: 0 };
  if (b['type'] === 'image' || b['type'] === 'document') {
    const { tokens, text, pdfPages } = estimateMediaBlock(b);
    return { bytes: bytes(text), media: tokens, pdfPages };
  }
  // tool_use, tool_result and anything newer: its JSON is an upper bound on its text.
  return { bytes: bytes(JSON.stringify(b)), media: 0, pdfPages: 0 };
}

/** A request's input estimate, and the PDF pages it holds (each at `PDF_PAGE_TOKENS`). */
export interface InputEstimate {
  readonly tokens: number;
  readonly pdfPages: number;
}

/**
 * Estimates a request's input tokens without calling the provider, erring high: about one
 * token per three bytes of UTF-8 (real tokenizers average nearer four characters a token for
 * English), plus a per-message and a base overhead; images and PDFs from their bytes (their size,
 * their pages: see media-estimate.ts). The worker replaces the estimate with the provider's
 * count when the response arrives.
 */
export function estimateInputTokens(request: MessagesRequest): number {
  return estimateInput(request).tokens;
}

/** {@link estimateInputTokens}, with the PDF pages counted in it. */
export function estimateInput(request: MessagesRequest): InputEstimate {
  let total = 0;
  let media = 0;
  let pdfPages = 0;
  const add = (r: BlockSize) => {
    total += r.bytes;
    media += r.media;
    pdfPages += r.pdfPages;
  };
  if (typeof request.system === 'string') add(blockBytes(request.system));
  else for (const b of request.system ?? []) add(blockBytes(b));
  for (const m of request.messages) {
    if (typeof m.content === 'string') add(blockBytes(m.content));
    else for (const b of m.content) add(blockBytes(b));
  }
  if (request.tools) total += bytes(JSON.stringify(request.tools));
  const tokens =
    Math.ceil(total / 3) + media + PER_MESSAGE_TOKENS * request.messages.length + BASE_TOKENS;
  return { tokens, pdfPages };
}

/** The cost to reserve for a request: its input estimate plus the whole of max_tokens. */
export function estimateCost(
  request: MessagesRequest,
  inputTokens = estimateInputTokens(request),
): Cost {
  return { requests: 1, inputTokens, outputTokens: request.max_tokens };
}
