/**
 * The mock's stand-in tokenizer. It is deterministic and documented, but deliberately NOT the
 * `ceil(utf8 bytes / 3)` estimate clients use, so a client that trusts its own estimate is
 * exercised the way the real API exercises it: counts come back lower than estimated, by an
 * amount the client cannot know in advance.
 *
 * Rule for one text:
 * 1. Split it into pieces, left to right:
 *    - a word: a run of letters (with their combining marks), optionally preceded by ONE space or
 *      tab, which belongs to the word (as in BPE vocabularies, where " the" is one token);
 *    - a number: up to 3 digits (longer numbers split into groups of 3, like real tokenizers);
 *    - symbols: a run of punctuation or other symbols, optionally preceded by one space or tab;
 *    - whitespace: any other run of whitespace.
 * 2. Count each piece (units of a character: 1 for a 1-byte UTF-8 character, 2 for a 2-byte one,
 *    6 for a word character of 3+ bytes — CJK and similar scripts cost about a token a character —
 *    and 2 per 3-byte or 4 per 4-byte symbol such as an emoji):
 *    - word: `ceil(units / 6)` (so an English word of up to 6 letters is one token, 7 to 12 two);
 *    - number: 1;
 *    - symbols: `ceil(units / 2)`;
 *    - whitespace: `ceil(length / 4)`.
 * 3. Cap the sum at `ceil(utf8 bytes / 3)`. A client that budgets `ceil(bytes / 3)` plus a
 *    per-message overhead therefore never under-reserves, however odd the text
 *    ("a,b,c,d" would otherwise count 7). English prose lands near 4 characters a token.
 *
 * How a whole request counts (overheads, tools, images and PDFs) is in request-tokens.ts.
 *
 * A provider whose tokenizer differs more from llmq's estimate is had with {@link InputCounting}:
 * `ceil(characters / charsPerToken)` over every text, plus `perMessageTokens` a message.
 */

/** Tokens every request costs before any text (the real API also adds a few framing tokens). */
export const REQUEST_BASE_TOKENS = 3;
/** Tokens each message costs on top of its text (role and turn markers). */
export const MESSAGE_OVERHEAD_TOKENS = 3;
/** Tokens each tool definition costs on top of the text of its JSON. */
export const TOOL_OVERHEAD_TOKENS = 3;

const PIECE = /[ \t]?[\p{L}\p{M}]+|\p{N}{1,3}|[ \t]?[^\s\p{L}\p{M}\p{N}]+|\s+/gu;
const WORD = /^[ \t]?[\p{L}\p{M}]/u;
const NUMBER = /^\p{N}/u;
const SPACE = /^\s+$/u;
const LEADING_BLANK = /^[ \t]/;

/** Tokens of one text under the mock's rule (see the module comment). */
export function countTextTokens(text: string): number {
  if (text.length === 0) return 0;
  let tokens = 0;
  for (const match of text.matchAll(PIECE)) {
    tokens += countPiece(match[0]);
  }
  const cap = Math.ceil(Buffer.byteLength(text, 'utf8') / 3);
  return Math.min(tokens, cap);
}

function countPiece(piece: string): number {
  if (NUMBER.test(piece)) return 1;
  if (SPACE.test(piece)) return Math.ceil(piece.length / 4);
  const isWord = WORD.test(piece);
  // The one leading blank rides along for free, as it does in BPE vocabularies.
  const body = piece.replace(LEADING_BLANK, '');
  let units = 0;
  for (const char of body) {
    const code = char.codePointAt(0) ?? 0;
    if (code < 0x80) units += 1;
    else if (code < 0x800) units += 2;
    else if (code < 0x10000) units += isWord ? 6 : 2;
    else units += isWord ? 6 : 4;
  }
  return isWord ? Math.ceil(units / 6) : Math.ceil(units / 2);
}

/**
 * How the mock counts input tokens. With `charsPerToken`, a request counts
 * `ceil(characters / charsPerToken) + perMessageTokens × messages` (characters of the system
 * text, every message's texts and each tool's JSON, counted as code points; nothing else), a
 * counter unlike llmq's estimate (e.g. 3.6 and 7). Without it, the tokenizer above.
 * @inline
 */
export interface InputCounting {
  /** Characters a token. @default undefined (the tokenizer) */
  readonly charsPerToken?: number | undefined;
  /** Tokens each message costs on top of its text, with `charsPerToken`. @default 3 */
  readonly perMessageTokens?: number | undefined;
}
