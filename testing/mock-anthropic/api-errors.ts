/**
 * Error bodies and ids shaped like the real API's:
 * `{"type":"error","error":{"type":"…","message":"…"},"request_id":"req_…"}`.
 */

import { randomBytes } from 'node:crypto';
import { API_ERROR_STATUS, type ApiErrorType } from '../../shared/api-error-types.ts';

export type { ApiErrorType };
/** The error types of the real API, each with its HTTP status. */
export const ERROR_STATUS = API_ERROR_STATUS;

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
