import { estimateTextTokens } from '../../shared/estimate.ts';
import { contextTokensOf } from '../../shared/models.ts';
import { cacheableSystem } from '../../shared/prompt-cache.ts';
import type { MessagesRequest } from '../../shared/request.ts';
import type { MapReduceRequest } from '../flows.ts';
import type { PartContent } from './document-plan.ts';
import { type DocumentPart, splitDocument } from './split-document.ts';

export const DEFAULT_SUMMARY_PROMPT =
  'Summarize the document the user sends in three to five sentences. Keep the names, numbers and ' +
  'conclusions that matter; add nothing that is not in the document.';

export const COMBINE_PROMPT =
  'The user sends summaries of consecutive parts of one document, in order (each part begins ' +
  'with the end of the one before it). Combine them into one summary of the whole document in ' +
  'three to five sentences. Keep the names, numbers and conclusions that matter; add nothing ' +
  'that is not in the summaries.';

/** Tokens kept free in the context beside a part, the prompt and max_tokens (message overheads). */
const CONTEXT_MARGIN_TOKENS = 256;

export interface SummaryParams {
  readonly model: string;
  readonly maxTokens: number;
  readonly prompt: string;
  /** Mark the prompt of the parts' calls for caching when it is long enough. */
  readonly cachePrompt?: boolean;
  /** The most tokens a part may hold; unset: what the model's context leaves. */
  readonly chunkTokens?: number | undefined;
  /**
   * The most input tokens one call may have under the fleet's limits (see
   * `Producer.inputRoom`); parts are cut to fit it too. @default no bound
   */
  readonly inputRoom?: number | undefined;
}

/** Below this many tokens a part is too small to be worth a call: the limits are the problem. */
const SMALLEST_PART_TOKENS = 200;

/** How a document is summarized: one call, or in parts of at most `partTokens`. */
export interface DocumentPlan {
  readonly parts: readonly DocumentPart[];
  readonly partTokens: number;
}

/**
 * Splits a document longer than `chunkTokens` (or, without it, than the model's context leaves
 * beside the prompt and max_tokens) into parts, each small enough for one call to fit the
 * fleet's limits (`inputRoom`); a shorter one is one part. Limits too small for a part of
 * a useful size leave the document whole: its enqueue then says which limit it exceeds.
 */
export function planDocument(text: string, p: SummaryParams): DocumentPlan {
  const beside = estimateTextTokens(p.prompt) + CONTEXT_MARGIN_TOKENS;
  const byContext = contextTokensOf(p.model) - p.maxTokens - beside;
  const byLimits = (p.inputRoom ?? Number.POSITIVE_INFINITY) - beside;
  let partTokens = Math.min(p.chunkTokens ?? byContext, byContext);
  if (byLimits >= SMALLEST_PART_TOKENS) partTokens = Math.min(partTokens, Math.floor(byLimits));
  return { parts: splitDocument(text, { maxTokens: partTokens }), partTokens };
}

/** The map-reduce of a split document: one summary per part, then one of the summaries. */
export function summaryFlow(
  parts: readonly PartContent[],
  p: SummaryParams & { readonly combinePrompt?: string | undefined },
): MapReduceRequest {
  const ask = (system: MessagesRequest['system'], content: PartContent) => ({
    model: p.model,
    max_tokens: p.maxTokens,
    system,
    messages: [{ role: 'user' as const, content }],
  });
  const partPrompt = p.cachePrompt ? cacheableSystem(p.model, p.prompt) : p.prompt;
  return {
    parts: parts.map((part) => ask(partPrompt, part)),
    combine: ask(
      p.combinePrompt ?? COMBINE_PROMPT,
      `Summaries of the ${parts.length} parts of one document, in order:`,
    ),
  };
}
