/**
 * The mock's "model": a deterministic function of the request body. The same body always gets the
 * same length and the same lorem-like text, so benchmarks are repeatable and a retried request
 * costs what the first attempt would have.
 */

import { mulberry32 } from './prng.ts';

/**
 * Share of `max_tokens` produced: a fixed share, or a range to pick from per request.
 * @inline
 */
export type OutputShare = number | readonly [number, number];

export interface PlannedOutput {
  /** Output tokens, `max(1, round(share * max_tokens))`; the mock's tokenizer counts the text so. */
  readonly tokens: number;
  readonly stopReason: 'end_turn' | 'max_tokens';
  /** The hash the text is drawn from. */
  readonly seed: number;
  /** Whether the share was drawn from the seed (the text's draws come after it). */
  readonly drewShare: boolean;
}

// Words of 3 to 6 letters: each, with its leading space, is exactly one token for the tokenizer
// (and at least 3 bytes, so the bytes/3 cap never bites).
const WORDS = (
  'lorem ipsum dolor sit amet elit sed tempor labore dolore magna aliqua enim minim veniam quis ' +
  'nisi duis aute irure velit esse cillum fugiat nulla sint culpa mollit anim est non nostra rerum'
).split(' ');

/**
 * Plans the output for a request whose body hashes to `bodyHash`. With a range share, the share is
 * picked from the hash too (uniform in [lo, hi]). Nothing is generated yet: see
 * {@link outputPieces}.
 */
export function planOutput(bodyHash: number, maxTokens: number, share: OutputShare): PlannedOutput {
  const drewShare = typeof share !== 'number';
  const pickedShare = drewShare ? share[0] + (share[1] - share[0]) * mulberry32(bodyHash)() : share;
  const tokens = Math.min(maxTokens, Math.max(1, Math.round(pickedShare * maxTokens)));
  return {
    tokens,
    stopReason: tokens === maxTokens ? 'max_tokens' : 'end_turn',
    seed: bodyHash,
    drewShare,
  };
}

/**
 * The output's pieces, one a token, generated as they are read: a long stream holds one delta
 * of text at a time, never the whole answer.
 */
export function* outputPieces(plan: PlannedOutput): Generator<string> {
  const random = mulberry32(plan.seed);
  if (plan.drewShare) random();
  let sentenceLeft = 0;
  for (let n = 0; n < plan.tokens; n++) {
    // A period is a token of its own; never end on one so short outputs stay words.
    if (sentenceLeft === 0 && n > 0 && n < plan.tokens - 1) {
      yield '.';
      sentenceLeft = -1;
      continue;
    }
    const word = WORDS[Math.floor(random() * WORDS.length)] ?? 'lorem';
    if (n === 0) yield capitalize(word);
    else if (sentenceLeft === -1) yield ` ${capitalize(word)}`;
    else yield ` ${word}`;
    if (sentenceLeft <= 0) sentenceLeft = 5 + Math.floor(random() * 10);
    sentenceLeft--;
  }
}

/** The whole output text (bounded by `maxOutputTokens`, at most a million tokens). */
export function outputText(plan: PlannedOutput): string {
  let text = '';
  for (const piece of outputPieces(plan)) text += piece;
  return text;
}

function capitalize(word: string): string {
  return word.charAt(0).toUpperCase() + word.slice(1);
}
