import { estimateTextTokens } from '../../shared/estimate.ts';

/** One part of a split document. */
export interface DocumentPart {
  readonly text: string;
  /** Characters at the start of `text` that repeat the end of the previous part (0 for the first). */
  readonly overlap: number;
}

export interface SplitOptions {
  /** The most tokens a part may hold, its overlap included (as `estimateTextTokens` counts). */
  readonly maxTokens: number;
  /**
   * Tokens of the previous part's end repeated at the start of the next, so a sentence cut
   * from its context keeps some. @default min(500, maxTokens / 20)
   */
  readonly overlapTokens?: number;
  /** How tokens are counted. @default estimateTextTokens */
  readonly measure?: (text: string) => number;
}

/** The default overlap for parts of `maxTokens`. */
export const defaultOverlapTokens = (maxTokens: number): number =>
  Math.min(500, Math.floor(maxTokens / 20));

/**
 * Splits a text into parts of at most `maxTokens`: on paragraph boundaries, a paragraph longer
 * than a part on sentence boundaries, a sentence longer than a part between words, and a word
 * longer than a part anywhere (never inside a character). Each part after the first begins with
 * the end of the previous one (whole sentences when they fit, up to `overlapTokens`). The parts
 * without their overlaps, joined, are the text. A text that fits is one part.
 */
export function splitDocument(text: string, options: SplitOptions): DocumentPart[] {
  const measure = options.measure ?? estimateTextTokens;
  const { maxTokens } = options;
  const overlapTokens = options.overlapTokens ?? defaultOverlapTokens(maxTokens);
  if (!Number.isInteger(maxTokens) || maxTokens < 2) {
    throw new RangeError(`maxTokens must be a whole number from 2 up, got ${maxTokens}`);
  }
  if (!Number.isInteger(overlapTokens) || overlapTokens < 0 || overlapTokens * 2 > maxTokens) {
    throw new RangeError(
      `overlapTokens must be a whole number from 0 to half of maxTokens (${maxTokens}), got ${overlapTokens}`,
    );
  }
  if (measure(text) <= maxTokens) return [{ text, overlap: 0 }];
  // Room for a part's own text: what the overlap leaves.
  const room = maxTokens - overlapTokens;
  const cores: string[] = [];
  let current = '';
  let used = 0;
  for (const unit of units(text, room, 0, measure)) {
    const t = measure(unit);
    if (used + t > room && current !== '') {
      cores.push(current);
      current = '';
      used = 0;
    }
    current += unit;
    used += t;
  }
  if (current !== '') cores.push(current);
  return cores.map((core, i) => {
    const overlap =
      i === 0 || overlapTokens === 0 ? '' : tail(cores[i - 1]!, overlapTokens, 1, measure);
    return { text: overlap + core, overlap: overlap.length };
  });
}

/** Cuts a text into pieces that keep their trailing separators, coarsest first. */
const LEVELS: readonly ((text: string) => string[])[] = [
  (t) => cutAfter(t, /\n[ \t]*\n\s*/g), // paragraphs
  (t) => cutAfter(t, /[.!?…]+["'”’)\]]*\s+/g), // sentences
  (t) => cutAfter(t, /\s+/g), // words
];

/** The text in pieces of at most `room` tokens, each as coarse as fits. */
function units(
  text: string,
  room: number,
  level: number,
  measure: (t: string) => number,
): string[] {
  if (measure(text) <= room) return [text];
  const cut = LEVELS[level];
  if (!cut) return hardSplit(text, room, measure);
  const pieces = cut(text);
  // Nothing to cut on at this level: go finer.
  if (pieces.length === 1) return units(text, room, level + 1, measure);
  return pieces.flatMap((p) => units(p, room, level + 1, measure));
}

/** The longest end of `text` within `budget` tokens, in whole pieces of the finest level needed. */
function tail(text: string, budget: number, level: number, measure: (t: string) => number): string {
  const cut = LEVELS[level];
  const pieces = cut ? cut(text) : [...text];
  let out = '';
  let used = 0;
  for (let i = pieces.length - 1; i >= 0; i--) {
    const t = measure(pieces[i]!);
    if (used + t > budget) {
      if (out === '' && cut) return tail(pieces[i]!, budget, level + 1, measure);
      break;
    }
    out = pieces[i]! + out;
    used += t;
  }
  return out;
}

/** Cuts after each match of `separator` (global); the pieces joined are the text. */
function cutAfter(text: string, separator: RegExp): string[] {
  const pieces: string[] = [];
  let start = 0;
  for (const m of text.matchAll(separator)) {
    const end = m.index + m[0].length;
    if (end > start && end < text.length) {
      pieces.push(text.slice(start, end));
      start = end;
    }
  }
  pieces.push(text.slice(start));
  return pieces;
}

/** Pieces of at most `room` tokens, cut between characters (code points). */
function hardSplit(text: string, room: number, measure: (t: string) => number): string[] {
  const chars = [...text];
  const pieces: string[] = [];
  let start = 0;
  while (start < chars.length) {
    // The longest run from `start` that fits, by bisection (measure grows with length).
    let lo = start + 1;
    let hi = chars.length;
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      if (measure(chars.slice(start, mid).join('')) <= room) lo = mid;
      else hi = mid - 1;
    }
    pieces.push(chars.slice(start, lo).join(''));
    start = lo;
  }
  return pieces;
}
