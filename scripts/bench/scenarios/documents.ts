import Anthropic from '@anthropic-ai/sdk';
import type { MessagesRequest } from '../../../shared/request.ts';
import { base64, makePdf } from '../../../testing/media.ts';
import type { MockAnthropicOptions } from '../../../testing/mock-anthropic/index.ts';
import { bucketMinimumSpanMs, type CallShape, idealSchedule } from '../budget.ts';
import { withMock } from '../mock.ts';
import type { ScenarioContext, ScenarioResult } from '../report.ts';
import { roundingFor, shapeLabel } from '../shapes.ts';
import { count, ratio, seconds } from '../table.ts';
import { MODEL, outputTokens, prng } from '../workload.ts';
import { inputLimited, llmqOnEachShape, SPAN_HEADERS, spanCells } from './shape-runs.ts';

const LIMIT = 40_000;
const MAX_TOKENS = 300;
const SHARE = 0.5;
const CONCURRENCY = 10;

/**
 * `n` summarization jobs, each one base64 PDF of 1–6 pages of text and 5–120 KB in all (an
 * attached file makes up the size, as fonts and pictures do), the same every run.
 */
async function pdfRequests(n: number): Promise<{ requests: MessagesRequest[]; bytes: number[] }> {
  const rng = prng(31);
  const requests: MessagesRequest[] = [];
  const bytes: number[] = [];
  for (let i = 0; i < n; i++) {
    const pages = 1 + Math.floor(rng() * 6);
    const target = 5_000 + Math.floor(rng() * 115_000);
    const bare = (await makePdf(pages, 50, i)).length;
    const pdf = await makePdf(pages, 50, i, Math.max(0, target - bare - 400));
    bytes.push(pdf.length);
    requests.push({
      model: MODEL,
      max_tokens: MAX_TOKENS,
      messages: [
        {
          role: 'user',
          content: [
            {
              type: 'document',
              source: { type: 'base64', media_type: 'application/pdf', data: base64(pdf) },
            },
            { type: 'text', text: 'Summarize this document in three sentences.' },
          ],
        },
      ],
    } as MessagesRequest);
  }
  return { requests, bytes };
}

/** What the mock charges each request's input, from its own count_tokens (it reads the PDFs). */
async function inputAtMock(mock: MockAnthropicOptions, requests: readonly MessagesRequest[]) {
  return withMock({ ...mock, limits: {} }, async (m) => {
    const client = new Anthropic({ apiKey: 'bench-key', baseURL: m.url, maxRetries: 0 });
    const out: number[] = [];
    for (const r of requests) {
      const { model, messages } = r;
      out.push((await client.messages.countTokens({ model, messages } as never)).input_tokens);
    }
    return out;
  });
}

/**
 * Documents: 30 PDFs summarized under 40,000 input tokens per window. The API charges a PDF by
 * its pages (1,500–3,000 tokens each); llmq reads the page count from the file and reserves the
 * most a page costs, learning down from the usage.
 */
export async function documentsScenario(ctx: ScenarioContext): Promise<ScenarioResult> {
  const { windowMs, latency, mock, budget } = inputLimited(ctx, LIMIT, SHARE, CONCURRENCY);
  const calls = ctx.smoke ? 8 : ctx.quick ? 10 : 30;
  const { requests, bytes } = await pdfRequests(calls);
  const inputs = await inputAtMock(mock, requests);
  const output = outputTokens(MAX_TOKENS, SHARE);
  const shapes: CallShape[] = inputs.map((input) => ({
    input,
    maxTokens: MAX_TOKENS,
    output,
    latencyMs: latency.baseMs + latency.perTokenMs * output,
  }));
  const slidingMs = idealSchedule(shapes, budget).minimumMs;
  const bucketSpanMs = bucketMinimumSpanMs(shapes, budget);
  const runs = await llmqOnEachShape(ctx, {
    scenario: 'documents',
    mock,
    limit: LIMIT,
    requests,
    limiter: { windowMs, limits: { inputTokens: LIMIT } },
    concurrency: CONCURRENCY,
    maxInFlight: CONCURRENCY,
  });
  // Against a window the wall time is compared with the ideal client's; against a bucket, the
  // span of admissions with the least a full bucket and its refill allow.
  const measure = (r: (typeof runs)[number]) =>
    r.shape === 'sliding'
      ? { got: r.run.wallMs, bound: slidingMs, what: 'wall time' }
      : { got: r.spanMs, bound: bucketSpanMs, what: 'admission span' };
  const total = inputs.reduce((a, b) => a + b, 0);
  return {
    name: 'documents',
    title: `${calls} PDFs of ${count(Math.min(...bytes))}–${count(Math.max(...bytes))} bytes (${count(total)} input tokens at the mock), ${LIMIT} input tokens per ${windowMs / 1000} s, readings rounded to ${roundingFor(LIMIT)}`,
    settings: { mock: { ...mock }, calls, bytes, inputs, slidingMs, bucketSpanMs },
    headers: [...SPAN_HEADERS, 'measured / its minimum'],
    rows: runs.map((r) => {
      const m = measure(r);
      return [
        ...spanCells(r, calls, r.shape === 'sliding' ? slidingMs : bucketSpanMs),
        ratio(m.got / m.bound),
      ];
    }),
    figures: runs.map((r) => ({
      client: r.client,
      completed: r.run.completed,
      rateLimited: r.stats.responses['429'] ?? 0,
      spanMs: r.spanMs,
      wallMs: r.run.wallMs,
      ...measure(r),
    })),
    targets: runs.flatMap((r) => {
      const m = measure(r);
      return [
        {
          name: `${shapeLabel(r.shape)}: every document, zero 429s`,
          met: r.run.completed === calls && (r.stats.responses['429'] ?? 0) === 0,
          detail: `${r.run.completed}/${calls}, ${r.stats.responses['429'] ?? 0} 429s`,
        },
        {
          name: `${shapeLabel(r.shape)}: ${m.what} within 1.3× its minimum`,
          met: m.got <= 1.3 * m.bound,
          detail: `${seconds(m.got)} against ${seconds(m.bound)} (${ratio(m.got / m.bound)})`,
        },
      ];
    }),
    notes: [
      `pages 1–6 a document, 50 lines of text a page; the mock charges 1,500 tokens a page plus a third of a token per byte of its content, at most 3,000; llmq reserves 3,000 a page until its learning brings that down`,
      `sliding minimum: the ideal client (${CONCURRENCY} at once, first come first served, each document charged what the mock counts): ${seconds(slidingMs)}; bucket: (input charged − capacity) / refill rate = ${seconds(bucketSpanMs)}`,
    ],
  };
}
