import { countMockTokens, type InputCounting } from '../../testing/mock-anthropic/index.ts';
import type { CallShape } from './budget.ts';

/** A Messages request as the bench sends it (the SDK's params, llmq's job request). */
export interface BenchRequest {
  readonly model: string;
  readonly max_tokens: number;
  readonly messages: readonly { readonly role: 'user'; readonly content: string }[];
}

export const MODEL = 'claude-sonnet-5-5';

/** The provider's window: 10 s as in the seed; `--quick` divides every window by 10. */
export const windowMsFor = (quick: boolean): number => (quick ? 1_000 : 10_000);

/**
 * The mock's latency: a base before the first token plus a time per output token. Full runs use
 * 200 ms + 0.5 ms a token (a 100-token answer takes 250 ms, an 8,000-token request with 4,000
 * tokens of output 2.2 s); `--quick` divides windows and latencies by 10 (50 ms + 0.05 ms a
 * token: a little more than a tenth, so HTTP's own cost stays small beside it).
 */
export interface Latency {
  readonly baseMs: number;
  readonly perTokenMs: number;
}

export const latencyFor = (quick: boolean): Latency =>
  quick ? { baseMs: 50, perTokenMs: 0.05 } : { baseMs: 200, perTokenMs: 0.5 };

/** The output the mock produces for a fixed share: `max(1, round(share × max_tokens))`. */
export const outputTokens = (maxTokens: number, share: number): number =>
  Math.min(maxTokens, Math.max(1, Math.round(share * maxTokens)));

/** A deterministic generator in [0, 1) (mulberry32), so every run sends the same work. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/** A word of letters only, 6 at most: one token at the mock, and different for every i. */
function tag(i: number): string {
  let s = '';
  let n = i;
  for (let k = 0; k < 3; k++) {
    s = String.fromCharCode(97 + (n % 26)) + s;
    n = Math.floor(n / 26);
  }
  return `doc${s}`;
}

const WORDS =
  'lorem ipsum dolor sit amet elit sed tempor labore dolore magna aliqua enim minim veniam quis'.split(
    ' ',
  );

/**
 * The published workload's call: a one-word prompt and max_tokens 200. The mock charges 3 (request)
 * + 3 (message) + 1 (the word) + 200 = 207 tokens, the article's "about 207 tokens each".
 */
export function shortCall(i: number, maxTokens = 200): BenchRequest {
  return { model: MODEL, max_tokens: maxTokens, messages: [{ role: 'user', content: tag(i) }] };
}

/**
 * A request that costs `total` tokens at the mock, about a tenth of it input (words of at most 6
 * letters are one token each) and the rest max_tokens.
 */
export function sizedCall(i: number, total: number): BenchRequest {
  const words = Math.max(1, Math.round(total * 0.1) - 7);
  const text = [tag(i)];
  for (let k = 1; k < words; k++) text.push(WORDS[(i + k) % WORDS.length]!);
  const req: BenchRequest = {
    model: MODEL,
    max_tokens: 1,
    messages: [{ role: 'user', content: text.join(' ') }],
  };
  const input = countMockTokens(req);
  return { ...req, max_tokens: Math.max(1, total - input) };
}

/**
 * The fleet's mix: 60% small (100 to 600 tokens), 30% medium (600 to 3,000), 10% large (3,000 to
 * 8,000), drawn from a fixed seed.
 */
export function mixedCalls(n: number, seed = 7): BenchRequest[] {
  const next = prng(seed);
  const calls: BenchRequest[] = [];
  for (let i = 0; i < n; i++) {
    const r = next();
    const [lo, hi] = r < 0.6 ? [100, 600] : r < 0.9 ? [600, 3_000] : [3_000, 8_000];
    calls.push(sizedCall(i, Math.round(lo + (hi - lo) * next())));
  }
  return calls;
}

/** The counter of an independent stand-in (issue 21): characters / 3.6 + 7 a message. */
export const DIFFERING_COUNTER: InputCounting = { charsPerToken: 3.6, perMessageTokens: 7 };

/**
 * The split-limits fleet's mix: input of 15 to 1,500 tokens as {@link DIFFERING_COUNTER} counts
 * it and max_tokens of 50 to 1,500, each uniform, from a fixed seed.
 */
export function splitCalls(n: number, seed = 21): BenchRequest[] {
  const next = prng(seed);
  const { charsPerToken = 3.6, perMessageTokens = 7 } = DIFFERING_COUNTER;
  return Array.from({ length: n }, (_, i) => {
    const input = Math.round(15 + 1_485 * next());
    const maxTokens = Math.round(50 + 1_450 * next());
    const chars = Math.max(7, Math.floor((input - perMessageTokens) * charsPerToken));
    let text = tag(i);
    for (let k = 1; text.length < chars; k++) text += ` ${WORDS[(i + k) % WORDS.length]}`;
    return {
      model: MODEL,
      max_tokens: maxTokens,
      messages: [{ role: 'user', content: text.slice(0, chars) }],
    };
  });
}

/** Each request's shape at the mock: its charge, the output a fixed share produces, its latency. */
export function shapesOf(
  requests: readonly BenchRequest[],
  share: number,
  latency: Latency,
  counting: InputCounting = {},
): CallShape[] {
  return requests.map((r) => {
    const output = outputTokens(r.max_tokens, share);
    return {
      input: countMockTokens(r, counting),
      maxTokens: r.max_tokens,
      output,
      latencyMs: latency.baseMs + latency.perTokenMs * output,
    };
  });
}

/** Total tokens the mock charges for a request at admission (input + max_tokens). */
export const costAtMock = (r: BenchRequest, counting: InputCounting = {}): number =>
  countMockTokens(r, counting) + r.max_tokens;
