import { estimateInput } from '../../shared/estimate.ts';
import { PDF_PAGE_TOKENS } from '../../shared/media-estimate.ts';
import type { PageCostReading } from '../../shared/page-costs.ts';
import type { MessagesRequest } from '../../shared/request.ts';

/**
 * A content block of a user message (text, image, document), as the API takes it.
 * @inline
 */
export type ContentBlock = Readonly<Record<string, unknown>> & { readonly type: string };

/** What one call of a document sends as its user message. */
export type PartContent = string | readonly ContentBlock[];

/** One call of a document: what it sends, and the provider's count of it when it was taken. */
export interface PlannedPart {
  readonly content: PartContent;
  /** The provider's count of the call's input (count_tokens): reserved as is. */
  readonly counted?: number | undefined;
}

/** What planning a document needs to know. */
export interface PlanContext {
  readonly model: string;
  readonly maxTokens: number;
  readonly prompt: string;
  readonly tenant: string | undefined;
  /** The user's part size for text (`--chunk-tokens`); unset: what the limits and context allow. */
  readonly chunkTokens: number | undefined;
  /**
   * The most input tokens one call may hold: the fleet's limits (configured or read from the
   * provider) and the model's context beside max_tokens. Infinity for no bound.
   */
  readonly room: number;
  /** What the limits give of `room` (Infinity when none), for text cut by estimate. */
  readonly limitRoom: number;
  /** What the model's context gives of `room`, beside max_tokens. */
  readonly contextRoom: number;
  /** The provider's count of a call's input, or undefined when it cannot be had now. */
  readonly coster: {
    count(
      request: MessagesRequest,
      p: { readonly tenant: string | undefined; readonly pdfPages: number },
    ): Promise<number | undefined>;
  };
  /** What a PDF page costs, as the fleet learned it when the plan began. */
  readonly pages: PageCostReading;
  /** The request one call sends for `content`. */
  request(content: PartContent): MessagesRequest;
}

/**
 * What a call is reserved at, as the gate will reserve it: llmq's estimate (text erring high,
 * images by their pixels), its PDF pages at what the fleet learned a page costs.
 */
export function guessInput(request: MessagesRequest, ctx: PlanContext): number {
  const e = estimateInput(request);
  return e.tokens - e.pdfPages * (PDF_PAGE_TOKENS - ctx.pages.perPage);
}

/** The PDF pages a request sends (as the estimate counts them). */
export const pdfPagesOf = (request: MessagesRequest): number => estimateInput(request).pdfPages;
