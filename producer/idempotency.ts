import { createHash, randomUUID } from 'node:crypto';
import { IdempotencyConflictError, RequestValidationError } from '../shared/errors.ts';

/**
 * Idempotency: a key maps to one deterministic job id (`i-` and 40 hex digits of
 * sha256(tenant, key)), so the same key never makes a second job, in any process, for as long
 * as the first job exists (queued, running, or kept after it finished: 7 days by default).
 * BullMQ refuses a second job with an existing id atomically; the depth gate sees it first and
 * answers with the existing id without taking room. Once the first job is gone (cancelled, or
 * removed when its retention ran out) the same key makes a new job, under the same id. Keys are
 * scoped by tenant, so two tenants never share (or learn of) each other's jobs.
 */
export function jobIdForKey(key: string, tenant: string | undefined): string {
  checkIdempotencyKey(key);
  const hash = createHash('sha256')
    .update(`llmq/v1\n${tenant ?? ''}\n${key}`)
    .digest('hex');
  return `i-${hash.slice(0, 40)}`;
}

/** An id for a job without an idempotency key (known before the add, for the depth gate). */
export function newJobId(): string {
  return randomUUID();
}

/**
 * Throws unless `key` is a string of 1 to 512 characters of valid Unicode. A lone surrogate
 * (`\ud800`) is refused: UTF-8 has no encoding for it, so hashing would turn it into U+FFFD and
 * `k\ud800`, `k\udbff` and `k\uFFFD` would name one job. U+FFFD itself is refused: it is what
 * invalid UTF-8 in a body decodes to, so `k\xff` and `k\xfe` would name one job too.
 */
export function checkIdempotencyKey(
  key: unknown,
  field = 'idempotency_key',
): asserts key is string {
  if (typeof key !== 'string' || key.length < 1 || key.length > 512) {
    const shown =
      typeof key === 'string' ? `a string of ${key.length} characters` : JSON.stringify(key);
    throw new RequestValidationError([
      { field, message: `must be a string of 1 to 512 characters (got ${shown})` },
    ]);
  }
  const replaced = key.indexOf('\ufffd');
  if (replaced >= 0) {
    throw new RequestValidationError([
      {
        field,
        message: `must be valid UTF-8 without U+FFFD (the character invalid UTF-8 decodes to, at character ${replaced}): send the key's bytes as valid UTF-8`,
      },
    ]);
  }
  const lone = /\p{Surrogate}/u.exec(key);
  if (lone) {
    const code = lone[0].charCodeAt(0).toString(16).padStart(4, '0');
    throw new RequestValidationError([
      {
        field,
        message: `must be valid Unicode: it holds a lone surrogate (\\u${code} at character ${lone.index}), which has no UTF-8 encoding`,
      },
    ]);
  }
}

const UTF8 = new TextDecoder('utf-8', { fatal: true });

/**
 * An `Idempotency-Key` header as the client sent it: Node reads header bytes as Latin-1, so
 * they are decoded again as UTF-8, and bytes that are not UTF-8 are refused (never merged).
 */
export function keyFromHeader(raw: string, field = 'idempotency-key'): string {
  let key: string;
  try {
    key = UTF8.decode(Buffer.from(raw, 'latin1'));
  } catch {
    throw new RequestValidationError([
      { field, message: 'must be valid UTF-8: send the key as UTF-8 text, or in ASCII' },
    ]);
  }
  checkIdempotencyKey(key, field);
  return key;
}

/**
 * Throws IdempotencyConflictError when `existing`, the job already under `id`, holds another
 * request than the one of `digest`: a key's second request never gets the first one's answer.
 * A job of an older producer (no digest) is taken as the same.
 */
export function refuseOtherRequest(
  id: string,
  existing: { readonly data?: unknown } | undefined,
  digest: string | undefined,
): void {
  const theirs = (existing?.data as { digest?: unknown } | undefined)?.digest;
  if (typeof theirs === 'string' && theirs !== digest) throw new IdempotencyConflictError(id);
}
