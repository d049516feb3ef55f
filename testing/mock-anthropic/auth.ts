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

/**
 * The caller of a Bedrock request: the access key id of its SigV4 signature
 * (`Authorization: AWS4-HMAC-SHA256 Credential=AKID/…`), or a Bedrock API key sent as a bearer
 * token. The signature itself is not checked: the mock trusts any credentials.
 */
export function awsKeyOf(req: IncomingMessage): string | undefined {
  const authorization = req.headers.authorization ?? '';
  const signed = /^AWS4-HMAC-SHA256\s+Credential=([^/\s,]+)\//i.exec(authorization);
  if (signed) return signed[1];
  return /^Bearer\s+(\S+)\s*$/i.exec(authorization)?.[1];
}

/** The caller of a Vertex AI request: its OAuth access token (not checked). */
export function bearerTokenOf(req: IncomingMessage): string | undefined {
  return /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '')?.[1];
}
