/** The Messages API's error types, each with the HTTP status that carries it. */
export const API_ERROR_STATUS = {
  invalid_request_error: 400,
  authentication_error: 401,
  permission_error: 403,
  not_found_error: 404,
  conflict_error: 409,
  request_too_large: 413,
  rate_limit_error: 429,
  api_error: 500,
  overloaded_error: 529,
} as const;

export type ApiErrorType = keyof typeof API_ERROR_STATUS;
