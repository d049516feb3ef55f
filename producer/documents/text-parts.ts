import { estimateInputTokens } from '../../shared/estimate.ts';
import type { PlanContext, PlannedPart } from './document-plan.ts';
import { planDocument } from './long-document.ts';

/**
 * A text's calls: the whole text when its estimate fits a call, else parts cut on paragraphs
 * and sentences (long-document.ts). When only the limits split it (no `chunkTokens`), the
 * provider's count is asked first: a text whose count fits goes whole, reserved as counted.
 */
export async function textParts(text: string, ctx: PlanContext): Promise<PlannedPart[]> {
  const plan = planDocument(text, { ...ctx, inputRoom: ctx.limitRoom });
  if (plan.parts.length === 1) return [{ content: text }];
  const whole = ctx.request(text);
  // Above the model's context it is cut whatever the count; below, the count may show it fits.
  if (ctx.chunkTokens === undefined && estimateInputTokens(whole) <= ctx.contextRoom) {
    const counted = await ctx.coster.count(whole, { tenant: ctx.tenant, pdfPages: 0 });
    if (counted !== undefined && counted <= ctx.room) return [{ content: text, counted }];
  }
  return plan.parts.map((part) => ({ content: part.text }));
}
