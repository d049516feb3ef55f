import type { Via } from '../../shared/batch-via.ts';
import { contextTokensOf } from '../../shared/models.ts';
import { cacheableSystem } from '../../shared/prompt-cache.ts';
import type { MessagesRequest } from '../../shared/request.ts';
import type { Costing } from '../costing.ts';
import type { EnqueuedFlow, MapReduceRequest } from '../flows.ts';
import { jobIdForKey } from '../idempotency.ts';
import type { EnqueuedJob, EnqueueOptions } from '../producer-options.ts';
import { blockParts } from './block-parts.ts';
import type { DocumentCoster } from './document-coster.ts';
import type { ContentBlock, PartContent, PlanContext, PlannedPart } from './document-plan.ts';
import { DEFAULT_SUMMARY_PROMPT, summaryFlow } from './long-document.ts';
import { pdfBlock, pdfParts } from './pdf-parts.ts';
import { textParts } from './text-parts.ts';

/**
 * A document to send through the queue: text, a PDF's bytes, or content blocks (images, text,
 * documents) sent together in one user message.
 *
 * @example
 * ```ts
 * const report: DocumentSource = { pdf: await readFile('report.pdf') };
 * const photos: DocumentSource = { blocks: images.map((data) => ({
 *   type: 'image', source: { type: 'base64', media_type: 'image/png', data } })) };
 * ```
 * @inline
 */
export type DocumentSource =
  | { readonly text: string }
  | { readonly pdf: Uint8Array }
  | { readonly blocks: readonly ContentBlock[] };

/**
 * How a document is asked: its model, max_tokens and prompt (a summary by default), and the
 * enqueue options of its jobs.
 *
 * @example
 * ```ts
 * const options: DocumentOptions = {
 *   model: 'claude-haiku-4-5',
 *   maxTokens: 512,
 *   idempotencyKey: 'report-2026-q3',
 *   priority: 'batch',
 * };
 * ```
 * @inline
 */
export interface DocumentOptions extends EnqueueOptions {
  /** @default 'claude-haiku-4-5' */
  readonly model?: string;
  /** max_tokens of each call. @default 512 */
  readonly maxTokens?: number;
  /** The system prompt of each call on the document (or a part). @default a short summary */
  readonly prompt?: string;
  /** The system prompt that combines the parts' answers. @default combine the summaries */
  readonly combinePrompt?: string;
  /** Mark the prompt for the API's prompt cache when it is long enough. @default true */
  readonly cachePrompt?: boolean;
  /** Text longer than this many tokens (estimated) goes in parts of this size. @default the limits */
  readonly chunkTokens?: number;
}

/**
 * What {@link Producer.enqueueDocument} did: the job to wait for (the combine job of a document
 * in parts), its parts' ids (none for one call), and how many calls of the provider's
 * `count_tokens` it took.
 * @inline
 */
export interface EnqueuedDocument extends EnqueuedFlow {
  /** Calls the document takes before its answer: 1, or its parts (the combine call aside). */
  readonly parts: number;
  /** `count_tokens` calls this enqueue made. */
  readonly counted: number;
}

/** What enqueueing a document needs of the producer. */
export interface DocumentQueue {
  /** What a call may hold (`inputRoom`) and what a page costs (`pageCosts`). */
  readonly costing: Pick<Costing, 'inputRoom' | 'pageCosts'>;
  /** The part ids of a job already there under `id` (none for one call), or undefined. */
  existing(id: string, via: Via): Promise<readonly string[] | undefined>;
  enqueueJob(request: unknown, options: EnqueueOptions, counted?: number): Promise<EnqueuedJob>;
  enqueueFlow(
    flow: MapReduceRequest,
    options: EnqueueOptions,
    counts: readonly (number | undefined)[],
  ): Promise<EnqueuedFlow>;
}

/**
 * Enqueues a document: one job when it fits one call, else a map-reduce of its parts (text cut
 * on paragraphs, a PDF by page ranges, blocks in runs) and a combine job, each part fitting
 * the fleet's limits (configured or read from the provider) and the model's context. With an
 * idempotency key, a document already there is re-attached, nothing planned or counted again.
 */
export async function enqueueDocument(
  q: DocumentQueue,
  coster: DocumentCoster,
  source: DocumentSource,
  options: DocumentOptions = {},
): Promise<EnqueuedDocument> {
  const s = settingsOf(options);
  const via = options.via ?? 'messages';
  const key = options.idempotencyKey;
  if (key !== undefined) {
    const id = jobIdForKey(key, options.tenant);
    const partIds = await q.existing(id, via);
    if (partIds) return { id, partIds, created: false, parts: partIds.length || 1, counted: 0 };
  }
  const tally = { counted: 0 };
  const ctx = await planContext(q, coster, s, { tenant: options.tenant, via, tally });
  const parts = await partsOf(source, ctx);
  const { counted } = tally;
  if (parts.length === 1) {
    const [only] = parts as [PlannedPart];
    const job = await q.enqueueJob(ctx.request(only.content), options, only.counted);
    return { ...job, partIds: [], parts: 1, counted };
  }
  const flow = summaryFlow(
    parts.map((part) => part.content),
    s,
  );
  const counts = parts.map((part) => part.counted);
  const added = await q.enqueueFlow(flow, options, counts);
  return { ...added, parts: parts.length, counted };
}

type Settings = ReturnType<typeof settingsOf>;

function settingsOf(o: DocumentOptions) {
  return {
    model: o.model ?? 'claude-haiku-4-5',
    maxTokens: o.maxTokens ?? 512,
    prompt: o.prompt ?? DEFAULT_SUMMARY_PROMPT,
    combinePrompt: o.combinePrompt,
    cachePrompt: o.cachePrompt ?? true,
    chunkTokens: o.chunkTokens,
  };
}

/** The room of one call (Message Batches: the context alone), and what a page costs now. */
async function planContext(
  q: DocumentQueue,
  coster: DocumentCoster,
  s: Settings,
  p: {
    readonly tenant: string | undefined;
    readonly via: Via;
    readonly tally: { counted: number };
  },
): Promise<PlanContext> {
  const { tenant, via, tally } = p;
  const { pageCosts } = q.costing;
  const contextRoom = contextTokensOf(s.model) - s.maxTokens;
  const limitRoom =
    via === 'batches'
      ? Number.POSITIVE_INFINITY
      : await q.costing.inputRoom(s.model, s.maxTokens, tenant);
  const system = s.cachePrompt ? cacheableSystem(s.model, s.prompt) : s.prompt;
  return {
    ...s,
    tenant,
    room: Math.min(limitRoom, contextRoom),
    limitRoom,
    contextRoom,
    coster: {
      async count(request, about) {
        const n = await coster.count(request, about);
        if (n !== undefined) tally.counted++;
        return n;
      },
    },
    pages: await pageCosts.read(s.model).catch(() => pageCosts.cached(s.model)),
    request: (content: PartContent): MessagesRequest => ({
      model: s.model,
      max_tokens: s.maxTokens,
      system,
      messages: [{ role: 'user', content: content as MessagesRequest['messages'][0]['content'] }],
    }),
  };
}

/**
 * The calls of a document. With no room for any input (max_tokens alone does not fit), the
 * whole of it: its enqueue is refused, naming max_tokens.
 */
async function partsOf(source: DocumentSource, ctx: PlanContext): Promise<PlannedPart[]> {
  if (ctx.room < 1) {
    if ('text' in source) return [{ content: source.text }];
    return [{ content: 'pdf' in source ? [pdfBlock(source.pdf)] : source.blocks }];
  }
  if ('text' in source) return textParts(source.text, ctx);
  if ('pdf' in source) return pdfParts(source.pdf, ctx);
  return blockParts(source.blocks, ctx);
}
