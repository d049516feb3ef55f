/**
 * The mock's prompt cache, as the API documents it. A block with `cache_control` marks a
 * breakpoint; the prefix up to and including it (tools, then system, then messages; the model's
 * too) is an entry of the caller's key. A request reads the longest of its breakpoints' prefixes
 * that is cached and readable, and writes every later one. An entry:
 * - is readable from the moment the response that wrote it begins (`readableAt`: its first
 *   token, `latencyMs` after admission, streamed or not): requests that arrive before that pay
 *   the write again;
 * - lives `ttlMs` after its last use (a write or a read), twelve times that for `"ttl": "1h"`;
 * - is never made for a prefix below the model's minimum (1,024 tokens, 2,048 for Haiku): such
 *   a breakpoint is ignored, silently.
 */

import { createHash, type Hash } from 'node:crypto';
import { type Segment, tokensOf } from './request-tokens.ts';
import type { InputCounting } from './tokenizer.ts';

/** What a request's input was made of, as `usage` reports it. */
export interface CacheUse {
  /** Input after the last breakpoint written or read: charged and billed in full. */
  readonly inputTokens: number;
  /** Input written to the cache now (charged as input by the limits). */
  readonly creationTokens: number;
  /** Input read from the cache (not charged by the limits). */
  readonly readTokens: number;
  /** `creationTokens` by lifetime. */
  readonly creation5m: number;
  readonly creation1h: number;
}

interface Entry {
  readableAt: number;
  expiresAt: number;
}

interface Breakpoint {
  readonly id: string;
  readonly tokens: number;
  readonly ttl: '5m' | '1h';
}

/** The least a prefix must count to be cached, by model. */
export function minimumCacheableTokens(model: string): number {
  return model.includes('haiku') ? 2_048 : 1_024;
}

export class PromptCache {
  private readonly entries = new Map<string, Entry>();
  private uses = 0;

  constructor(private readonly ttlMs: number) {}

  /**
   * What the request's prefixes make of its input for `apiKey` at `now`: the longest readable
   * one is read, the later ones written. Nothing changes until `commit()` (the call admitted);
   * what it writes becomes readable at `readableAt`.
   */
  plan(
    apiKey: string,
    model: string,
    segments: readonly Segment[],
    counting: InputCounting,
    now: number,
    readableAt: number,
  ): { readonly use: CacheUse; commit(): void } {
    if (++this.uses % 256 === 0) this.prune(now);
    const total = tokensOf(segments, counting);
    const points = breakpoints(apiKey, model, segments, counting).filter(
      (point) => point.tokens >= minimumCacheableTokens(model),
    );
    let hit = -1;
    for (let k = points.length - 1; k >= 0 && hit < 0; k--) {
      const entry = this.entries.get(points[k]!.id);
      if (entry && entry.expiresAt > now && entry.readableAt <= now) hit = k;
    }
    const read = hit >= 0 ? points[hit]!.tokens : 0;
    const writes = points.slice(hit + 1);
    let written = read;
    const creation = { '5m': 0, '1h': 0 };
    for (const point of writes) {
      creation[point.ttl] += point.tokens - written;
      written = point.tokens;
    }
    const commit = () => {
      const readPoint = points[hit];
      const entry = readPoint && this.entries.get(readPoint.id);
      if (readPoint && entry) entry.expiresAt = now + this.lifetime(readPoint);
      for (const point of writes) this.write(point, now, readableAt);
    };
    const use = {
      inputTokens: total - written,
      creationTokens: written - read,
      readTokens: read,
      creation5m: creation['5m'],
      creation1h: creation['1h'],
    };
    return { use, commit };
  }

  /** Forgets every entry. */
  clear(): void {
    this.entries.clear();
  }

  private write(point: Breakpoint, now: number, readableAt: number): void {
    const entry = this.entries.get(point.id);
    const expiresAt = readableAt + this.lifetime(point);
    // A write still in flight stays the one that makes the entry readable first.
    if (entry && entry.expiresAt > now) {
      entry.readableAt = Math.min(entry.readableAt, readableAt);
      entry.expiresAt = Math.max(entry.expiresAt, expiresAt);
    } else {
      this.entries.set(point.id, { readableAt, expiresAt });
    }
  }

  private lifetime(point: Breakpoint): number {
    return point.ttl === '1h' ? this.ttlMs * 12 : this.ttlMs;
  }

  private prune(now: number): void {
    for (const [id, entry] of this.entries) if (entry.expiresAt <= now) this.entries.delete(id);
  }
}

/** The breakpoints of a request: each one's entry id and the tokens of its prefix. */
function breakpoints(
  apiKey: string,
  model: string,
  segments: readonly Segment[],
  counting: InputCounting,
): Breakpoint[] {
  const hash: Hash = createHash('sha256').update(apiKey).update('\0').update(model);
  const found: Breakpoint[] = [];
  segments.forEach((segment, i) => {
    hash.update('\0').update(segment.key);
    if (segment.breakpoint === undefined) return;
    found.push({
      id: hash.copy().digest('base64'),
      tokens: tokensOf(segments, counting, i + 1),
      ttl: segment.breakpoint,
    });
  });
  return found;
}
