import { createHash } from 'node:crypto';

/**
 * A request's digest: sha256 of its JSON with every object's keys sorted, so the same request
 * written in another key order has the same digest. What a finished job keeps of its request,
 * and what tells an idempotency key's second request from its first.
 */
export function requestDigest(request: unknown): string {
  return createHash('sha256').update(canonicalJson(request)).digest('hex');
}

/** JSON with object keys in sorted order (arrays keep theirs; undefined fields are left out). */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map((v) => canonicalJson(v ?? null)).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const fields = Object.keys(value)
      .sort()
      .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`);
    return `{${fields.join(',')}}`;
  }
  return JSON.stringify(value);
}
