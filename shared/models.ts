import { ModelNotServedError } from './errors.ts';

/**
 * The context window of current models, in tokens: the input and max_tokens of one call must fit
 * in it. Every current Claude model has 200,000 (larger windows are opt-in betas).
 */
export const CONTEXT_TOKENS = 200_000;

/** The context window of a model, in tokens. */
export function contextTokensOf(_model: string): number {
  return CONTEXT_TOKENS;
}

/**
 * Per-model limits: the provider limits each model class on its own. A config maps model
 * patterns (`claude-sonnet-4-5`, or a prefix ending in `*`: `claude-sonnet-*`) to limits; a
 * job is charged to its model's scope `model:<pattern>` besides the global and tenant scopes.
 */

/** A pattern's shape: a model name, or a prefix ending in one `*`. */
export const MODEL_PATTERN = /^[a-z0-9][a-z0-9._-]{0,99}\*?$/;

/** The limiter scope of a model pattern. */
export function modelScopeName(pattern: string): string {
  return `model:${pattern}`;
}

/** The pattern of a model scope. */
export function patternOfScope(scope: string): string {
  return scope.slice('model:'.length);
}

/** Whether a scope is a model's (its headers update it). */
export function isModelScope(scope: string): boolean {
  return scope.startsWith('model:');
}

/**
 * The pattern a model falls under: its exact name first, else the longest prefix pattern that
 * matches; undefined when none does.
 */
export function matchModel(patterns: readonly string[], model: string): string | undefined {
  if (patterns.includes(model)) return model;
  let best: string | undefined;
  for (const p of patterns) {
    if (!p.endsWith('*')) continue;
    const prefix = p.slice(0, -1);
    if (model.startsWith(prefix) && (best === undefined || p.length > best.length)) best = p;
  }
  return best;
}

/** A model name that may name a scope as it is (what the API's model ids look like). */
const SCOPE_SAFE = /^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,199}$/;

/**
 * The model scope a job is charged to: `model:<pattern>`; when no pattern matches, the model's
 * own (`model:<name>`, unlimited but for what the provider's headers say of it: the API limits
 * each model class), or a ModelNotServedError when `strict`.
 */
export function modelScopeOf(
  patterns: readonly string[],
  model: string,
  strict: boolean,
): string | undefined {
  const p = matchModel(patterns, model);
  if (p !== undefined) return modelScopeName(p);
  if (strict) {
    throw new ModelNotServedError(
      model,
      `${JSON.stringify(model)} matches no pattern of models (${patterns.join(', ') || 'none'}) and modelsStrict is on: ` +
        'add a pattern for it, or turn modelsStrict off to use the global limits only',
    );
  }
  return SCOPE_SAFE.test(model) ? modelScopeName(model) : undefined;
}

/** The model scope among a job's scopes, if any (its call's headers update it). */
export function modelScopeAmong(scopes: readonly string[] | undefined): string | undefined {
  return scopes?.find(isModelScope);
}
