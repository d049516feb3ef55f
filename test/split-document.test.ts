import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type DocumentPart, splitDocument } from '../producer/documents/split-document.ts';
import { estimateTextTokens } from '../shared/estimate.ts';

/** The parts without their overlaps, joined: the text they came from. */
const rejoin = (parts: readonly DocumentPart[]) =>
  parts.map((p) => p.text.slice(p.overlap)).join('');

/** A paragraph of `n` sentences, each about 60 bytes. */
const paragraph = (label: string, n: number) =>
  Array.from({ length: n }, (_, i) => `Sentence ${i} of ${label} says one plain thing here.`).join(
    ' ',
  );

describe('splitDocument', () => {
  it('keeps a text that fits whole', () => {
    const text = paragraph('a', 3);
    expect(splitDocument(text, { maxTokens: 1_000 })).toEqual([{ text, overlap: 0 }]);
  });

  it('cuts on paragraph boundaries, each part within its tokens, with an overlap of whole sentences', () => {
    const paras = ['p1', 'p2', 'p3', 'p4', 'p5', 'p6'].map((l) => paragraph(l, 5));
    const text = paras.join('\n\n');
    // Two paragraphs (~450 bytes, ~152 tokens) fit a part beside the overlap; three do not.
    const parts = splitDocument(text, { maxTokens: 200, overlapTokens: 20 });
    expect(parts).toHaveLength(3);
    expect(rejoin(parts)).toBe(text);
    for (const p of parts) expect(estimateTextTokens(p.text)).toBeLessThanOrEqual(200);
    // Each part's own text starts a paragraph.
    expect(parts[1]!.text.slice(parts[1]!.overlap)).toMatch(/^Sentence 0 of p3 /);
    expect(parts[2]!.text.slice(parts[2]!.overlap)).toMatch(/^Sentence 0 of p5 /);
    // The overlap is the previous part's last sentence (whole), within its tokens.
    const overlap = parts[1]!.text.slice(0, parts[1]!.overlap);
    expect(overlap).toBe('Sentence 4 of p2 says one plain thing here.\n\n');
    expect(estimateTextTokens(overlap)).toBeLessThanOrEqual(20);
    expect(parts[0]!.overlap).toBe(0);
  });

  it('cuts a paragraph longer than a part between its sentences', () => {
    const text = paragraph('long', 40);
    const parts = splitDocument(text, { maxTokens: 300, overlapTokens: 0 });
    expect(parts.length).toBeGreaterThan(1);
    expect(rejoin(parts)).toBe(text);
    for (const p of parts) {
      expect(estimateTextTokens(p.text)).toBeLessThanOrEqual(300);
      expect(p.text).toMatch(/^Sentence \d+ of long /);
      expect(p.text.trimEnd()).toMatch(/here\.$/);
    }
  });

  it('cuts a sentence longer than a part between words, and a word longer than a part anywhere', () => {
    const words = Array.from({ length: 400 }, (_, i) => `word${i}`).join(' ');
    const byWords = splitDocument(words, { maxTokens: 100, overlapTokens: 0 });
    expect(rejoin(byWords)).toBe(words);
    for (const p of byWords) {
      expect(estimateTextTokens(p.text)).toBeLessThanOrEqual(100);
      expect(p.text).toMatch(/^word\d+/);
    }
    // No space at all, and characters of 1 to 4 bytes: cut between code points, never inside one.
    const blob = 'aé中😀'.repeat(300);
    const hard = splitDocument(blob, { maxTokens: 50, overlapTokens: 5 });
    expect(rejoin(hard)).toBe(blob);
    for (const p of hard) {
      expect(estimateTextTokens(p.text)).toBeLessThanOrEqual(50);
      expect(p.text).not.toMatch(/[\uD800-\uDBFF]$/);
      expect(p.text).not.toMatch(/^[\uDC00-\uDFFF]/);
    }
    // The overlap of a part cut from one long word is its previous part's last characters.
    expect(hard[1]!.overlap).toBeGreaterThan(0);
    expect(hard[0]!.text.endsWith(hard[1]!.text.slice(0, hard[1]!.overlap))).toBe(true);
  });

  it('refuses a part size that leaves no room, and an overlap above half a part', () => {
    expect(() => splitDocument('x', { maxTokens: 1 })).toThrow(/maxTokens .* got 1/);
    expect(() => splitDocument('x', { maxTokens: 100, overlapTokens: 60 })).toThrow(
      /overlapTokens .* got 60/,
    );
  });

  it('any text: parts within their tokens, overlaps repeating the previous end, rejoined exactly', () => {
    const piece = fc.oneof(
      fc.constantFrom('. ', '\n\n', ' ', '! ', 'é', '中', '😀', '\n \n'),
      fc.string({ minLength: 1, maxLength: 30 }),
    );
    fc.assert(
      fc.property(
        fc.array(piece, { maxLength: 200 }).map((a) => a.join('')),
        fc.integer({ min: 4, max: 120 }),
        (text, maxTokens) => {
          const parts = splitDocument(text, { maxTokens });
          expect(rejoin(parts)).toBe(text);
          parts.forEach((p, i) => {
            expect(estimateTextTokens(p.text)).toBeLessThanOrEqual(maxTokens);
            if (i > 0) expect(parts[i - 1]!.text.endsWith(p.text.slice(0, p.overlap))).toBe(true);
          });
        },
      ),
      { numRuns: 300 },
    );
  });
});
