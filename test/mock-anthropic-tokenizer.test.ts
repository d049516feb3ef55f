import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { RequestValidationError } from '../shared/errors.ts';
import {
  countMockTokens,
  countTextTokens,
  MESSAGE_OVERHEAD_TOKENS,
  REQUEST_BASE_TOKENS,
} from '../testing/mock-anthropic/index.ts';
import { outputPieces, outputText, planOutput } from '../testing/mock-anthropic/output.ts';

const bytes = (text: string) => Buffer.byteLength(text, 'utf8');
/** What a client budgets for one text: about a token per 3 bytes. */
const clientEstimate = (text: string) => Math.ceil(bytes(text) / 3);

const PROSE =
  'The queue admits a job only when the shared budget has room for it. Workers estimate the ' +
  'input tokens from the bytes of the prompt, reserve max_tokens for the output, and give the ' +
  'unused part back once the answer arrives. When the provider answers 429, every worker pauses ' +
  'for the time the retry-after header asks, instead of hammering the API with retries.\n\n' +
  'Numbers like 1234567 and symbols like ->, ==, or {} are split the way real tokenizers split them.';

describe('the mock tokenizer', () => {
  it('never counts more than ceil(utf8 bytes / 3) + 4 for any text', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 400 }), (text) => {
        const tokens = countTextTokens(text);
        expect(tokens).toBeLessThanOrEqual(clientEstimate(text) + 4);
        expect(tokens).toBeGreaterThanOrEqual(text.length > 0 ? 1 : 0);
        expect(Number.isInteger(tokens)).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it('stays under the bound for punctuation soup and one-letter words, where pieces are tiny', () => {
    const soup = fc.string({
      unit: fc.constantFrom('a', ',', ' ', '.', '1', 'é', '—', '😀', '\n'),
    });
    fc.assert(
      fc.property(soup, (text) => {
        expect(countTextTokens(text)).toBeLessThanOrEqual(clientEstimate(text) + 4);
      }),
      { numRuns: 1000 },
    );
  });

  it('counts English prose at about 4 characters a token, well below the bytes/3 estimate', () => {
    const tokens = countTextTokens(PROSE);
    expect(PROSE.length / tokens).toBeGreaterThan(3.8);
    expect(PROSE.length / tokens).toBeLessThan(5.5);
    expect(tokens).toBeLessThan(0.8 * clientEstimate(PROSE));
  });

  it('is deterministic and differs from the bytes/3 estimate on ordinary words', () => {
    const words = fc
      .array(fc.stringMatching(/^[a-z]{2,12}$/), { minLength: 5, maxLength: 60 })
      .map((list) => list.join(' '));
    fc.assert(
      fc.property(words, (text) => {
        expect(countTextTokens(text)).toBe(countTextTokens(text));
        expect(countTextTokens(text)).toBeLessThan(clientEstimate(text));
      }),
    );
  });

  it('counts scripts without spaces at about a token a character', () => {
    expect(countTextTokens('東京は日本の首都です')).toBe(10);
    expect(countTextTokens('1234567')).toBe(3);
    expect(countTextTokens('')).toBe(0);
  });

  it('counts a request as a base, plus system, plus per-message overhead and text', () => {
    const content = fc.oneof(
      fc.string({ minLength: 1 }),
      fc.array(
        fc.string({ minLength: 1 }).map((text) => ({ type: 'text' as const, text })),
        { minLength: 1, maxLength: 3 },
      ),
    );
    const message = fc.record({ role: fc.constantFrom('user', 'assistant'), content });
    fc.assert(
      fc.property(
        fc.array(message, { minLength: 1, maxLength: 5 }),
        fc.string(),
        (messages, system) => {
          const texts = (c: string | { text: string }[]) =>
            typeof c === 'string'
              ? countTextTokens(c)
              : c.reduce((n, b) => n + countTextTokens(b.text), 0);
          const expected =
            REQUEST_BASE_TOKENS +
            countTextTokens(system) +
            messages.reduce((n, m) => n + MESSAGE_OVERHEAD_TOKENS + texts(m.content), 0);
          expect(countMockTokens({ model: 'claude-x', max_tokens: 5, system, messages })).toBe(
            expected,
          );
        },
      ),
    );
  });

  it('refuses to count a body that is not a Messages request, naming the field', () => {
    expect(() =>
      countMockTokens({ model: 'claude-x', messages: [{ role: 'robot', content: 'x' }] }),
    ).toThrow(RequestValidationError);
    expect(() => countMockTokens({ model: 'claude-x' })).toThrow('messages: Field required');
  });
});

describe('the mock output', () => {
  it('has max(1, round(share * max_tokens)) tokens of text the tokenizer counts the same', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 ** 32 - 1 }),
        fc.integer({ min: 1, max: 3000 }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        (hash, maxTokens, share) => {
          const output = planOutput(hash, maxTokens, share);
          expect(output.tokens).toBe(Math.max(1, Math.round(share * maxTokens)));
          expect(countTextTokens(outputText(output))).toBe(output.tokens);
          expect([...outputPieces(output)]).toHaveLength(output.tokens);
          expect(output.stopReason).toBe(output.tokens === maxTokens ? 'max_tokens' : 'end_turn');
        },
      ),
      { numRuns: 300 },
    );
  });

  it('picks a share within [lo, hi] from the body hash, the same for the same hash', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 2 ** 32 - 1 }), (hash) => {
        const output = planOutput(hash, 1000, [0.3, 0.9]);
        expect(output.tokens).toBeGreaterThanOrEqual(300);
        expect(output.tokens).toBeLessThanOrEqual(900);
        expect(outputText(planOutput(hash, 1000, [0.3, 0.9]))).toBe(outputText(output));
      }),
      { numRuns: 200 },
    );
    const lengths = new Set(
      Array.from({ length: 50 }, (_, i) => planOutput(i, 1000, [0.3, 0.9]).tokens),
    );
    expect(lengths.size).toBeGreaterThan(30);
  });
});
