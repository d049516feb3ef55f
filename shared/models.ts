/**
 * The context window of current models, in tokens: the input and max_tokens of one call must fit
 * in it. Every current Claude model has 200,000 (larger windows are opt-in betas).
 */
export const CONTEXT_TOKENS = 200_000;

/** The context window of a model, in tokens. */
export function contextTokensOf(_model: string): number {
  return CONTEXT_TOKENS;
}
