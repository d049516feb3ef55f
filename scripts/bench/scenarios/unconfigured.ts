import type { MockAnthropicOptions } from '../../../testing/mock-anthropic/index.ts';
import { bucketMinimumSpanMs, idealSchedule } from '../budget.ts';
import type { ScenarioContext, ScenarioResult } from '../report.ts';
import { roundingFor, shapeLabel } from '../shapes.ts';
import { ratio, seconds } from '../table.ts';
import { costAtMock, latencyFor, shapesOf, shortCall, windowMsFor } from '../workload.ts';
import { llmqOnEachShape, SPAN_HEADERS, spanCells } from './shape-runs.ts';

const LIMIT = 4_000;
const SHARE = 0.5;
const CONCURRENCY = 10;

/**
 * The published workload with no limit configured: the worker learns the key's limits from the
 * headers of its first answer (one call goes alone until then) and paces the rest by them.
 * Only the window's length is given, as the API's minute is llmq's default.
 */
export async function unconfiguredScenario(ctx: ScenarioContext): Promise<ScenarioResult> {
  const windowMs = windowMsFor(ctx.quick);
  const calls = ctx.quick ? 24 : 60;
  const latency = latencyFor(ctx.quick);
  const requests = Array.from({ length: calls }, (_, i) => shortCall(i));
  const shapes = shapesOf(requests, SHARE, latency, ctx.counting);
  const mock: MockAnthropicOptions = {
    ...ctx.counting,
    windowMs,
    limits: { tokens: LIMIT },
    outputAccounting: 'reserve',
    latencyMs: latency.baseMs,
    latencyPerOutputTokenMs: latency.perTokenMs,
    outputShare: SHARE,
  };
  const budget = {
    limits: { tokens: LIMIT },
    windowMs,
    concurrency: CONCURRENCY,
    accounting: 'reserve',
  } as const;
  const runs = await llmqOnEachShape(ctx, {
    scenario: 'unconfigured',
    mock,
    limit: LIMIT,
    requests,
    limiter: { windowMs, limits: {} },
    concurrency: CONCURRENCY,
  });
  // A window: wall time against the ideal client's; a bucket: the admissions' span against
  // (tokens charged − capacity) / refill rate, as in `published`.
  const measure = (shape: 'sliding' | 'bucket', r: (typeof runs)[number]) =>
    shape === 'sliding'
      ? { got: r.run.wallMs, bound: idealSchedule(shapes, budget).minimumMs, what: 'wall time' }
      : { got: r.spanMs, bound: bucketMinimumSpanMs(shapes, budget), what: 'admission span' };
  const figures = runs.map((r) => ({ r, ...measure(r.shape, r) }));
  return {
    name: 'unconfigured',
    title: `${calls} calls of ${costAtMock(requests[0]!, ctx.counting)} tokens, ${LIMIT} tokens per ${windowMs / 1000} s, no limit configured in llmq (read from the headers), readings rounded to ${roundingFor(LIMIT)}`,
    settings: { mock, calls, concurrency: CONCURRENCY },
    headers: [...SPAN_HEADERS, 'measured / its minimum'],
    rows: figures.map((f) => [...spanCells(f.r, calls, f.bound), ratio(f.got / f.bound)]),
    figures: figures.map((f) => ({
      client: f.r.client,
      completed: f.r.run.completed,
      rateLimited: f.r.stats.responses['429'] ?? 0,
      wallMs: f.r.run.wallMs,
      spanMs: f.r.spanMs,
      got: f.got,
      bound: f.bound,
    })),
    targets: figures.flatMap((f) => [
      {
        name: `${shapeLabel(f.r.shape)}: every call, at most one 429 (one model)`,
        met: f.r.run.completed === calls && (f.r.stats.responses['429'] ?? 0) <= 1,
        detail: `${f.r.run.completed}/${calls}, ${f.r.stats.responses['429'] ?? 0} 429s`,
      },
      {
        name: `${shapeLabel(f.r.shape)}: ${f.what} within 1.10× its minimum`,
        met: f.got <= 1.1 * f.bound,
        detail: `${seconds(f.got)} against ${seconds(f.bound)} (${ratio(f.got / f.bound)})`,
      },
    ]),
    notes: [
      'the worker is given the window (the API limits per minute, llmq’s default window; the bench scales it down) and nothing else: no limit, no in-flight cap',
    ],
  };
}
