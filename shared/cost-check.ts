import { ESTIMATE_VERSION, estimateInput } from './estimate.ts';
import type { JobData, PdfPages } from './job.ts';
import type { JobTicket } from './job-ticket.ts';
import { PDF_PAGE_TOKENS } from './media-estimate.ts';
import { isModelScope, matchModel, modelScopeOf, patternOfScope } from './models.ts';
import { cachePrefixOf } from './prompt-cache.ts';

/**
 * A provider's count is believed down to this fraction of the estimate's: below it, a token
 * would average more than 12 bytes (the estimate counts 3), which no text's count does.
 */
const COUNT_FLOOR_DIVISOR = 4;

/** What a job's request implies: its ticket, and its input estimate alone (this build's). */
export interface Implied {
  readonly ticket: JobTicket;
  readonly estimate: number;
}

/**
 * The ticket a job's request implies, from its claimed one: the cost recomputed by this build's
 * costing code, never below the claim (a claim from another version of the code is recomputed
 * too). Output is the request's max_tokens; a count from count_tokens is kept down to a floor
 * of the estimate; a PDF's pages are counted again, each at what the fleet learned (the claim
 * of a page's cost is not believed); the model scope is one the request's model falls under
 * (else the one `modelPatterns` give it). Tenant and deployment stay as claimed.
 */
export function impliedCost(
  claim: JobTicket,
  data: JobData,
  modelPatterns: readonly string[] = [],
): Implied {
  const request = data.request;
  const estimate = estimateInput(request);
  const counted = claim.x === 1;
  const floor = counted ? Math.ceil(estimate.tokens / COUNT_FLOOR_DIVISOR) : estimate.tokens;
  const prefix = cachePrefixOf(request);
  const { k: _k, p: _p, s: _s, ...kept } = claim;
  const scopes = scopesFor(claim.s, request.model, modelPatterns);
  const ticket: JobTicket = {
    ...kept,
    ...(scopes.length > 0 ? { s: scopes } : {}),
    c: [Math.max(1, claim.c[0]), Math.max(claim.c[1], floor), request.max_tokens],
    m: request.model,
    ...(prefix ? { k: [prefix.key, prefix.tokens] as const } : {}),
    ...(!counted && estimate.pdfPages > 0
      ? { p: [estimate.pdfPages, PDF_PAGE_TOKENS] as const }
      : {}),
    e: ESTIMATE_VERSION,
  };
  return { ticket, estimate: estimate.tokens };
}

/** The claimed scopes, with a model scope the model falls under (the claimed one if it does). */
function scopesFor(
  claimed: readonly string[] = [],
  model: string,
  patterns: readonly string[],
): readonly string[] {
  const scope = claimed.find(isModelScope);
  if (scope && matchModel([patternOfScope(scope)], model) !== undefined) return claimed;
  const own = modelScopeOf(patterns, model, false);
  const rest = claimed.filter((s) => !isModelScope(s));
  return own ? [...rest, own] : rest;
}

/** A ticket's cost as a job's data holds it (`cost`, `pdfPages`, `inputCounted`). */
export function costFieldsOf(t: JobTicket): Pick<JobData, 'cost' | 'pdfPages' | 'inputCounted'> {
  const pdfPages: PdfPages | undefined = t.p ? { pages: t.p[0], perPage: t.p[1] } : undefined;
  return {
    cost: { requests: t.c[0], inputTokens: t.c[1], outputTokens: t.c[2] },
    pdfPages,
    inputCounted: t.x === 1 ? true : undefined,
  };
}
