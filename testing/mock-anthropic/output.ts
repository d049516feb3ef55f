/**
 * The mock's "model": a deterministic function of the request body. The same body always gets the
 * same length and the same lorem-like text, so benchmarks are repeatable and a retried request
 * costs what the first attempt would have.
 */

import { mulberry32 } from './prng.ts';

/** Share of `max_tokens` produced: a fixed share, or a range to pick from per request. */
export type OutputShare = number | readonly [number, number];

export interface PlannedOutput {
  /** Output tokens, `max(1, round(share * max_tokens))`; the mock's tokenizer counts the text so. */
  readonly tokens: number;
  /** One string per output token; joined, they are the text. */
  readonly pieces: readonly string[];
  readonly stopReason: 'end_turn' | 'max_tokens';
}

// Words of 3 to 6 letters: each, with its leading space, is exactly one token for the tokenizer
// (and at least 3 bytes, so the bytes/3 cap never bites).
const WORDS = (
  'lorem ipsum dolor sit amet elit sed tempor labore dolore magna aliqua enim minim veniam quis ' +
  'nisi duis aute irure velit esse cillum fugiat nulla sint culpa mollit anim est non nostra rerum'
).split(' ');

/**
 * Plans the output for a request whose body hashes to `bodyHash`. With a range share, the share is
 * picked from the hash too (uniform in [lo, hi]).
 */
export function planOutput(bodyHash: number, maxTokens: number, share: OutputShare): PlannedOutput {
  const random = mulberry32(bodyHash);
  const pickedShare =
    typeof share === 'number' ? share : share[0] + (share[1] - share[0]) * random();
  const tokens = Math.min(maxTokens, Math.max(1, Math.round(pickedShare * maxTokens)));
  const pieces: string[] = [];
  let sentenceLeft = 0;
  while (pieces.length < tokens) {
    // A period is a token of its own; never end on one so short outputs stay words.
    if (sentenceLeft === 0 && pieces.length > 0 && pieces.length < tokens - 1) {
      pieces.push('.');
      sentenceLeft = -1;
      continue;
    }
    const word = WORDS[Math.floor(random() * WORDS.length)] ?? 'lorem';
    if (pieces.length === 0) pieces.push(capitalize(word));
    else if (sentenceLeft === -1) pieces.push(` ${capitalize(word)}`);
    else pieces.push(` ${word}`);
    if (sentenceLeft <= 0) sentenceLeft = 5 + Math.floor(random() * 10);
    sentenceLeft--;
  }
  return { tokens, pieces, stopReason: tokens === maxTokens ? 'max_tokens' : 'end_turn' };
}

function capitalize(word: string): string {
  return word.charAt(0).toUpperCase() + word.slice(1);
}
