/**
 * Who is calling. The real API takes the key in `x-api-key`; the installed SDK (1.14) sends it as
 * `Authorization: Bearer <key>` instead, so both are accepted, `x-api-key` first.
 */

import type { IncomingMessage } from 'node:http';

/** The message of the 401 for a request without a key. */
export const MISSING_KEY_MESSAGE = 'x-api-key header is required (or Authorization: Bearer <key>)';

/** The caller's API key, or undefined when neither header carries a non-empty one. */
export function apiKeyOf(req: IncomingMessage): string | undefined {
  const header = req.headers['x-api-key'];
  if (typeof header === 'string' && header.trim() !== '') return header.trim();
  const match = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
  return match?.[1];
}
