import Anthropic from '@anthropic-ai/sdk';
import type { MessagesRequest } from '../../../shared/request.ts';
import {
  countMockTokens,
  type MockAnthropicOptions,
} from '../../../testing/mock-anthropic/index.ts';
import { type CallShape, idealSchedule } from '../budget.ts';
import { withMock } from '../mock.ts';
import type { ScenarioContext, ScenarioResult } from '../report.ts';
import { roundingFor, shapeLabel } from '../shapes.ts';
import { ratio, seconds } from '../table.ts';
import { MODEL, outputTokens } from '../workload.ts';
import { inputLimited, llmqOnEachShape, SPAN_HEADERS, spanCells } from './shape-runs.ts';

const LIMIT = 10_000;
const PREFIX_TOKENS = 3_000;
const QUESTION_TOKENS = 200;
const MAX_TOKENS = 100;
const SHARE = 0.5;
const CONCURRENCY = 10;

const WORDS = 'queue limit token window bucket answer worker cache prompt model reply batch'.split(
  ' ',
);

/** `n` words of the list, from the `seed`th on. */
const words = (n: number, seed: number): string =>
  Array.from({ length: n }, (_, k) => WORDS[(seed + k * 7) % WORDS.length]).join(' ');

/** One job: the shared instructions (marked for caching) and a question of its own. */
function cachedCall(system: string, i: number, questionWords: number): MessagesRequest {
  return {
    model: MODEL,
    max_tokens: MAX_TOKENS,
    system: [{ type: 'text', text: system, cache_control: { type: 'ephemeral' } }],
    messages: [{ role: 'user', content: `Question ${i}: ${words(questionWords, i)}` }],
  } as MessagesRequest;
}

/** The fewest words whose text counts at least `tokens` at the mock, alone in a request. */
function wordsFor(tokens: number, counting: ScenarioContext['counting']): number {
  const of = (content: string) =>
    countMockTokens(
      { model: MODEL, max_tokens: 1, messages: [{ role: 'user', content }] },
      counting,
    );
  const bare = of('x');
  let n = Math.ceil(tokens / 2);
  const cost = (k: number) => of(words(k, 0)) - bare;
  while (cost(n) < tokens) n += 10;
  return n;
}

/**
 * What the mock charges for the first job (its input and the cache it writes) and what it reads
 * from the cache after: one write and one read on a mock of its own, asked through the SDK.
 */
async function cacheCharges(
  mock: MockAnthropicOptions,
  first: MessagesRequest,
  second: MessagesRequest,
) {
  return withMock({ ...mock, limits: {} }, async (m) => {
    const client = new Anthropic({ apiKey: 'bench-key', baseURL: m.url, maxRetries: 0 });
    const w = (await client.messages.create(first as never)).usage;
    const r = (await client.messages.create(second as never)).usage;
    return { written: w.cache_creation_input_tokens ?? 0, read: r.cache_read_input_tokens ?? 0 };
  });
}

/**
 * Prompt caching: 40 jobs sharing a ~3,000-token system prompt marked with `cache_control`, each
 * with a ~200-token question, under 10,000 input tokens per window. The cache's reads do not
 * count toward the limit, so the best client writes the prefix once, then sends the rest once
 * that response has begun, each charged only its question.
 */
export async function cachedScenario(ctx: ScenarioContext): Promise<ScenarioResult> {
  const { windowMs, latency, mock, budget } = inputLimited(ctx, LIMIT, SHARE, CONCURRENCY);
  const calls = ctx.smoke ? 12 : ctx.quick ? 20 : 40;
  const system = words(wordsFor(PREFIX_TOKENS, ctx.counting), 3);
  const questionWords = wordsFor(QUESTION_TOKENS, ctx.counting);
  const requests = Array.from({ length: calls }, (_, i) => cachedCall(system, i, questionWords));
  const charges = await cacheCharges(mock, requests[0]!, requests[1]!);
  const output = outputTokens(MAX_TOKENS, SHARE);
  // The ideal client: the writer first; the readers once its response has begun (the mock's
  // first token comes after its base latency), each charged what is not read from the cache.
  const shapes: CallShape[] = requests.map((r, i) => ({
    input: countMockTokens(r, ctx.counting) - (i === 0 ? 0 : charges.read),
    maxTokens: MAX_TOKENS,
    output,
    latencyMs: latency.baseMs + latency.perTokenMs * output,
    notBefore: i === 0 ? 0 : latency.baseMs,
  }));
  const runs = await llmqOnEachShape(ctx, {
    scenario: 'cached',
    mock,
    limit: LIMIT,
    requests,
    limiter: { windowMs, limits: { inputTokens: LIMIT } },
    concurrency: CONCURRENCY,
    maxInFlight: CONCURRENCY,
  });
  const bounds = runs.map(
    (r) => idealSchedule(shapes, { ...budget, shape: r.shape }).starts.at(-1)!,
  );
  return {
    name: 'cached',
    title: `${calls} jobs sharing a cached ${charges.written}-token system prompt, each with its own ${shapes[1]!.input}-token question, ${LIMIT} input tokens per ${windowMs / 1000} s, readings rounded to ${roundingFor(LIMIT)}`,
    settings: { mock, calls, concurrency: CONCURRENCY, charges, bounds },
    headers: [...SPAN_HEADERS, 'cache writes', 'cache reads'],
    rows: runs.map((r, i) => [
      ...spanCells(r, calls, bounds[i]!),
      String(r.stats.cache.writes),
      String(r.stats.cache.reads),
    ]),
    figures: runs.map((r, i) => ({
      client: r.client,
      completed: r.run.completed,
      rateLimited: r.stats.responses['429'] ?? 0,
      spanMs: r.spanMs,
      boundMs: bounds[i],
      wallMs: r.run.wallMs,
      cache: r.stats.cache,
    })),
    targets: runs.flatMap((r, i) => [
      {
        name: `${shapeLabel(r.shape)}: every job, zero 429s, one cache write`,
        met:
          r.run.completed === calls &&
          (r.stats.responses['429'] ?? 0) === 0 &&
          r.stats.cache.writes === 1,
        detail: `${r.run.completed}/${calls}, ${r.stats.responses['429'] ?? 0} 429s, ${r.stats.cache.writes} writes`,
      },
      {
        name: `${shapeLabel(r.shape)}: admission span within 1.5× the write-once client's`,
        met: r.spanMs <= 1.5 * bounds[i]!,
        detail: `${seconds(r.spanMs)} against ${seconds(bounds[i])} (${ratio(r.spanMs / bounds[i]!)})`,
      },
    ]),
    notes: [
      `bound: the ideal client writes the prefix with the first job and sends the others once its response has begun (${latency.baseMs} ms), ${CONCURRENCY} at a time, each charged its uncached input (cache reads do not count toward input limits); its last admission`,
      `the mock charged the write ${charges.written} tokens and read ${charges.read} from the cache`,
    ],
  };
}
