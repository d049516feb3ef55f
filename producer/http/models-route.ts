/**
 * `GET /v1/models` and `GET /v1/models/{id}` as the API answers them, for the models the fleet
 * knows of: the model names of its per-model limits (`models` of the config or of the fleet's
 * stored limits). A pattern (`claude-sonnet-*`) answers `retrieve` for every model it covers,
 * but names none to list.
 */
import { isModelScope, matchModel, patternOfScope } from '../../shared/models.ts';
import { type ApiErrorAnswer, apiError } from './anthropic-errors.ts';

/** An answer of the models routes: a body, or an error in the API's shape. */
export type ModelsAnswer = { readonly status: 200; readonly body: unknown } | ApiErrorAnswer;

/** The model patterns among limiter scopes (`model:<pattern>`). */
export function patternsOf(scopes: Readonly<Record<string, unknown>>): string[] {
  return Object.keys(scopes).filter(isModelScope).map(patternOfScope);
}

/** A ModelInfo: llmq knows the id only, so the rest is what the API gives when unknown. */
function modelInfo(id: string): Record<string, unknown> {
  return {
    type: 'model',
    id,
    display_name: id,
    created_at: '1970-01-01T00:00:00Z',
    capabilities: null,
    deprecated_at: null,
    lifecycle: 'active',
    line: null,
    max_input_tokens: null,
    max_tokens: null,
    retires_at: null,
  };
}

/** `GET /v1/models/{id}`: the model when a pattern of the fleet covers it, else a 404. */
export function retrieveModel(patterns: readonly string[], id: string): ModelsAnswer {
  if (matchModel(patterns, id) !== undefined) return { status: 200, body: modelInfo(id) };
  return apiError(
    'not_found_error',
    `model: ${id} (llmq: no model pattern of the fleet's limits covers it${patterns.length ? `: ${patterns.join(', ')}` : ''})`,
  );
}

/**
 * `GET /v1/models?limit=&after_id=&before_id=`: the named models, in pages as the API pages
 * them; a 404 when the fleet names none (its limits are not per model, or only by pattern).
 */
export function listModels(
  patterns: readonly string[],
  query: Readonly<Record<string, string | undefined>>,
): ModelsAnswer {
  const ids = patterns.filter((p) => !p.endsWith('*')).sort();
  if (ids.length === 0) {
    return apiError(
      'not_found_error',
      "llmq: the fleet's models are not known here: name them in its per-model limits " +
        `(models in the config, then \`llmq limits set\` or a worker)${patterns.length ? `; it has patterns only: ${patterns.join(', ')}` : ''}`,
    );
  }
  const limit = query['limit'] === undefined ? 20 : Number(query['limit']);
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) {
    return apiError(
      'invalid_request_error',
      `limit: must be a whole number from 1 to 1000 (got ${JSON.stringify(query['limit'])})`,
    );
  }
  const after = query['after_id'];
  const before = query['before_id'];
  let page: string[];
  let hasMore: boolean;
  if (before !== undefined) {
    const end = ids.indexOf(before);
    const upTo = Math.max(end, 0);
    page = ids.slice(Math.max(0, upTo - limit), upTo);
    hasMore = upTo - limit > 0;
  } else {
    const start = after === undefined ? 0 : ids.indexOf(after) + 1;
    const from = after !== undefined && start === 0 ? ids.length : start;
    page = ids.slice(from, from + limit);
    hasMore = from + limit < ids.length;
  }
  return {
    status: 200,
    body: {
      data: page.map(modelInfo),
      has_more: hasMore,
      first_id: page[0] ?? null,
      last_id: page.at(-1) ?? null,
    },
  };
}
