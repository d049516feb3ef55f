/** Reading request bodies and writing JSON answers with `node:http`. */

import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';

/** The real API refuses Messages bodies above 32 MB with 413 request_too_large. */
export const MAX_BODY_BYTES = 32 * 1024 * 1024;

/** The body as UTF-8 text, or null when it is larger than `limit` bytes (then read and dropped). */
export async function readBody(
  req: IncomingMessage,
  limit = MAX_BODY_BYTES,
): Promise<string | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    const buffer = chunk as Buffer;
    size += buffer.length;
    if (size <= limit) chunks.push(buffer);
  }
  return size > limit ? null : Buffer.concat(chunks).toString('utf8');
}

export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: OutgoingHttpHeaders = {},
): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, {
    ...headers,
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

export function sendEmpty(
  res: ServerResponse,
  status: number,
  headers: OutgoingHttpHeaders = {},
): void {
  if (res.headersSent || res.destroyed) return;
  res.writeHead(status, headers);
  res.end();
}

/** The words of the API's 413 and of its 400 for a body that is not JSON. */
export const TOO_LARGE_MESSAGE = 'Request exceeds the maximum allowed number of bytes.';
export const NOT_JSON_MESSAGE =
  'There was an error parsing the body of your request: it is not valid JSON.';

/** The body as JSON, or undefined when it is not JSON. */
export function parseJson(raw: string): { value: unknown } | undefined {
  try {
    return { value: JSON.parse(raw) };
  } catch {
    return undefined;
  }
}

/** Aborts when the server closes or the client goes away. */
export function untilGone(res: ServerResponse, serverSignal: AbortSignal): AbortSignal {
  const gone = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) gone.abort();
  });
  return AbortSignal.any([serverSignal, gone.signal]);
}
