/**
 * Error bodies and ids shaped like the real API's:
 * `{"type":"error","error":{"type":"…","message":"…"},"request_id":"req_…"}`.
 */

import { randomBytes } from 'node:crypto';

/** The error types of the real API, each with its HTTP status. */
export const ERROR_STATUS = {
  invalid_request_error: 400,
  authentication_error: 401,
  not_found_error: 404,
  request_too_large: 413,
  rate_limit_error: 429,
  api_error: 500,
  overloaded_error: 529,
} as const;

export type ApiErrorType = keyof typeof ERROR_STATUS;

export interface ApiErrorBody {
  type: 'error';
  error: { type: ApiErrorType; message: string; details?: { error_code: string } };
  request_id: string;
}

export function apiErrorBody(
  type: ApiErrorType,
  message: string,
  requestId: string,
  details?: { error_code: string },
): ApiErrorBody {
  return {
    type: 'error',
    error: details ? { type, message, details } : { type, message },
    request_id: requestId,
  };
}

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** A random id in the real API's style: prefix, `01`, then 22 base62 characters. */
function randomId(prefix: string): string {
  const bytes = randomBytes(22);
  let id = `${prefix}_01`;
  for (const byte of bytes) id += BASE62[byte % 62];
  return id;
}

export function newRequestId(): string {
  return randomId('req');
}

export function newMessageId(): string {
  return randomId('msg');
}
