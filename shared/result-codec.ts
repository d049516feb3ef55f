import { deflateRawSync, inflateRawSync } from 'node:zlib';
import type { JobResult } from './job.ts';

/**
 * Results from this size on are deflated in Redis, when that saves a quarter or more: a long
 * answer is text, and text deflates to about a third (docs/redis-memory.md, "Compression").
 * Shorter ones stay plain JSON, as BullMQ and Bull Board show them.
 */
export const DEFLATE_FROM_BYTES = 8 * 1024;

/** The one field of a deflated result as stored: base64 of its JSON, deflated (raw). */
const DEFLATED = 'llmqDeflated';

/** A completed job's result as Redis keeps it (the job's `returnvalue`), from its JSON. */
export function storedResultJson(json: string): string {
  const bytes = Buffer.byteLength(json);
  if (bytes < DEFLATE_FROM_BYTES) return json;
  const packed = deflateRawSync(json, { level: 1 }).toString('base64');
  return packed.length <= bytes * 0.75 ? JSON.stringify({ [DEFLATED]: packed }) : json;
}

/** A job's `returnvalue` as BullMQ parsed it, read back: a deflated result inflated. */
export function readStoredResult(stored: unknown): JobResult {
  const packed = (stored as Record<string, unknown> | null)?.[DEFLATED];
  if (typeof packed !== 'string') return stored as JobResult;
  return JSON.parse(inflateRawSync(Buffer.from(packed, 'base64')).toString('utf8')) as JobResult;
}
