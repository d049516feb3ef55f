import { type ApiErrorAnswer, apiError } from './anthropic-errors.ts';
import { type ApiKeyEntry, type ApiKeyStore, presentedKey } from './api-keys.ts';

/**
 * The entry of the tenant key a Messages API request presents (`x-api-key` or `Authorization:
 * Bearer`, both only when they agree), or the API's 401. From the headers alone, so it runs
 * before the body is read.
 */
export function gatewayCaller(
  keys: ApiKeyStore,
  headers: {
    readonly authorization?: string | undefined;
    readonly 'x-api-key'?: string | undefined;
  },
): ApiKeyEntry | ApiErrorAnswer {
  const presented = presentedKey(headers);
  if (presented === undefined)
    return apiError('authentication_error', 'x-api-key header is required');
  if ('conflict' in presented) {
    return apiError(
      'authentication_error',
      'x-api-key and Authorization: Bearer carry two different keys: send one',
    );
  }
  return keys.entryOf(presented.key) ?? apiError('authentication_error', 'invalid x-api-key');
}
