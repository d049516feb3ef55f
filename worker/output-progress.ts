import type { OutputPart } from '../shared/limiter/types.ts';

/** Where in a stream the output parts end: at each quarter of it. */
const MARKS = [0.25, 0.5, 0.75] as const;
/**
 * The share of each mark's tokens counted at its moment: characters stand for tokens, and a
 * stretch of short tokens arrives with fewer characters than its share. The rest waits for
 * the end, which is never early.
 */
const SAFE_SHARE = 0.9;

/**
 * Follows a stream's output as it arrives (the characters of its deltas, by arrival time), so
 * that the limiter can count each part of it from when it came instead of all of it from the
 * end: a provider that counts output as it is produced drops the first tokens of a long answer
 * from its window well before the last.
 */
export class OutputProgress {
  private chars = 0;
  /** Cumulative characters after each delta, and its arrival (performance.now). */
  private readonly at: number[] = [];
  private readonly upTo: number[] = [];

  /** Takes one stream event (the SDK's `streamEvent`). */
  add(event: { readonly type: string; readonly delta?: unknown }): void {
    if (event.type !== 'content_block_delta') return;
    const d = event.delta as Record<string, unknown> | undefined;
    const piece = d?.['text'] ?? d?.['partial_json'] ?? d?.['thinking'];
    if (typeof piece !== 'string' || piece.length === 0) return;
    this.chars += piece.length;
    this.at.push(performance.now());
    this.upTo.push(this.chars);
  }

  /**
   * The output parts for a settle now: of `outputTokens` in all, what had arrived by each
   * quarter of the characters, with how long ago. Empty when nothing was followed.
   */
  parts(outputTokens: number, now = performance.now()): OutputPart[] {
    if (this.chars === 0 || outputTokens <= 0) return [];
    const parts: OutputPart[] = [];
    let i = 0;
    let counted = 0;
    for (const mark of MARKS) {
      while (i < this.upTo.length && this.upTo[i]! < mark * this.chars) i++;
      if (i >= this.upTo.length) break;
      const share = (this.upTo[i]! / this.chars) * SAFE_SHARE;
      const upTo = Math.floor(outputTokens * share);
      if (upTo > counted) {
        parts.push({ agoMs: Math.max(0, now - this.at[i]!), tokens: upTo - counted });
        counted = upTo;
      }
    }
    return parts;
  }
}
