import type { MockAnthropicOptions } from '../../../testing/mock-anthropic/index.ts';
import { bucketMinimumSpanMs, fluidMinimumMs, idealSchedule, uniformMinimumMs } from '../budget.ts';
import type { TokenLimiter } from '../clients/primitives.ts';
import { runBaselineClient } from '../clients/run-baseline.ts';
import { SlidingWindow } from '../clients/sliding-window.ts';
import { TokenBucket } from '../clients/token-bucket.ts';
import { runLlmq, tokenBudget } from '../llmq-runner.ts';
import { withMock } from '../mock.ts';
import { CallRecorder } from '../recorder.ts';
import type { ScenarioContext, ScenarioResult } from '../report.ts';
import { roundingFor, SHAPES, type Shape, shapeLabel } from '../shapes.ts';
import { percent, ratio, seconds } from '../table.ts';
import { costAtMock, latencyFor, shapesOf, shortCall, windowMsFor } from '../workload.ts';
import { RATE_HEADERS, type RateRow, rateCells, rateRow } from './rate-rows.ts';

const LIMIT = 4_000;
const SHARE = 0.5;
const CONCURRENCY = 10;

/**
 * The seed's experiment: 60 calls of 207 tokens against 4,000 tokens per sliding 10 s window
 * (`reserve` accounting), through the article's four clients and through llmq.
 */
export async function publishedScenario(ctx: ScenarioContext): Promise<ScenarioResult> {
  const windowMs = windowMsFor(ctx.quick);
  // The smoke test's workload: two waves, enough for the baselines to draw their 429s.
  const calls = ctx.quick ? 24 : 60;
  const W = windowMs / 1000;
  const latency = latencyFor(ctx.quick);
  const requests = Array.from({ length: calls }, (_, i) => shortCall(i));
  const cost = costAtMock(requests[0]!, ctx.counting);
  const shapes = shapesOf(requests, SHARE, latency, ctx.counting);
  const budget = {
    limits: { tokens: LIMIT },
    windowMs,
    concurrency: CONCURRENCY,
    accounting: 'reserve',
  } as const;
  const ideal = idealSchedule(shapes, budget);
  const fluidMs = fluidMinimumMs(shapes, budget);
  const closedForm = uniformMinimumMs(
    calls,
    cost,
    { limit: LIMIT, windowMs, concurrency: CONCURRENCY },
    shapes[0]!.latencyMs,
  );
  const mockOptions: MockAnthropicOptions = {
    ...ctx.counting,
    windowMs,
    limits: { tokens: LIMIT },
    algorithm: 'sliding',
    outputAccounting: 'reserve',
    latencyMs: latency.baseMs,
    latencyPerOutputTokenMs: latency.perTokenMs,
    outputShare: SHARE,
  };
  // The article's clients as it measured them: the Semaphore alone, and each limiter in front of
  // `create_limited` (its section 2) with no semaphore.
  const baselines: {
    client: string;
    limiter: () => TokenLimiter | undefined;
    concurrency?: number;
    published: string;
  }[] = [
    {
      client: 'Semaphore(10) only',
      limiter: () => undefined,
      concurrency: CONCURRENCY,
      published: '36/60, 82, 15.4 s',
    },
    {
      client: `token bucket, full start (${LIMIT} + ${LIMIT / W}/s)`,
      limiter: () => new TokenBucket(LIMIT, LIMIT / W),
      published: '48/60, 60, 22.7 s',
    },
    {
      client: `token bucket sized (${0.2 * LIMIT} + ${(0.8 * LIMIT) / W}/s)`,
      limiter: () => new TokenBucket(0.2 * LIMIT, (0.8 * LIMIT) / W),
      published: '60/60, 0, 38.3 s',
    },
    {
      client: `client sliding window (${LIMIT} / ${W} s)`,
      limiter: () => new SlidingWindow(LIMIT, W),
      published: '60/60, 0, 30.5 s',
    },
  ];

  const rows: RateRow[] = [];
  const common = {
    total: calls,
    limit: LIMIT,
    windowMs,
    accounting: 'reserve' as const,
    minimumMs: ideal.minimumMs,
    fluidMs,
  };
  // One mock for the baselines, reset before each client: every client starts on an empty window.
  await withMock(mockOptions, async (mock) => {
    for (const b of baselines) {
      ctx.log(`published: ${b.client}`);
      await mock.reset();
      const recorder = new CallRecorder({ counting: ctx.counting });
      const run = await runBaselineClient({
        mockUrl: mock.url,
        requests,
        limiter: b.limiter(),
        concurrency: b.concurrency,
        recorder,
      });
      rows.push(
        rateRow({
          ...common,
          client: b.client,
          run,
          calls: await recorder.report(),
          stats: await mock.stats(),
          published: b.published,
        }),
      );
    }
  });
  // llmq against each shape, readings rounded as the API's.
  const llmqRows: Record<Shape, RateRow> = {} as Record<Shape, RateRow>;
  for (const shape of SHAPES) {
    const client = `llmq (1 worker, concurrency 10), ${shapeLabel(shape)}`;
    ctx.log(`published: ${client}`);
    const shaped = { ...mockOptions, algorithm: shape, roundReadings: roundingFor(LIMIT) };
    await withMock(shaped, async (mock) => {
      const run = await runLlmq({
        redisUrl: ctx.redisUrl,
        scope: 'published',
        mockUrl: mock.url,
        requests,
        ...tokenBudget(windowMs, LIMIT, CONCURRENCY),
        workers: { count: 1, where: 'in-process' },
        concurrency: CONCURRENCY,
      });
      const minimumMs = idealSchedule(shapes, { ...budget, shape }).minimumMs;
      const row = rateRow({
        ...common,
        minimumMs,
        client,
        run,
        calls: run.calls,
        stats: await mock.stats(),
      });
      llmqRows[shape] = row;
      rows.push(row);
    });
  }
  const bucketSpanMs = bucketMinimumSpanMs(shapes, budget);

  const llmq = llmqRows.sliding;
  const bucket = llmqRows.bucket;
  const spanOver = bucket.admissionSpanMs / bucketSpanMs;
  return {
    name: 'published',
    title: `${calls} calls of ${cost} tokens, ${LIMIT} tokens per ${W} s, a sliding window or a token bucket, readings rounded to ${roundingFor(LIMIT)} (reserve accounting)`,
    settings: {
      mock: mockOptions,
      calls: calls,
      costAtMock: cost,
      concurrency: CONCURRENCY,
      latencyMs: shapes[0]!.latencyMs,
      minimumMs: ideal.minimumMs,
      closedFormMinimumMs: closedForm,
      idealUtilization: ideal.utilization,
      bucketMinimumSpanMs: bucketSpanMs,
      roundReadings: roundingFor(LIMIT),
    },
    headers: RATE_HEADERS,
    rows: rows.map(rateCells),
    figures: rows,
    targets: [
      {
        name: 'llmq completes every call with zero 429s, on both shapes',
        met: [llmq, bucket].every((r) => r.completed === calls && r.rateLimited === 0),
        detail: `sliding ${llmq.completed}/${calls}, ${llmq.rateLimited} 429s; bucket ${bucket.completed}/${calls}, ${bucket.rateLimited} 429s`,
      },
      {
        name: "sliding window: llmq within 2% of the budget's minimum",
        met: llmq.wallOverMinimum <= 1.02,
        detail: `${seconds(llmq.wallMs)} against ${seconds(ideal.minimumMs)} (${ratio(llmq.wallOverMinimum)})`,
      },
      {
        name: "token bucket: llmq's admissions span within 5% of the bucket's minimum",
        met: spanOver <= 1.05,
        detail: `${seconds(bucket.admissionSpanMs)} against (tokens charged − capacity) / refill rate = ${seconds(bucketSpanMs)} (${ratio(spanOver)})`,
      },
    ],
    notes: [
      `minimum = (⌈${calls} / ⌊${LIMIT} / ${cost}⌋⌉ − 1) × ${W} s + ⌈calls in the last wave / ${CONCURRENCY}⌉ × one call's latency (${shapes[0]!.latencyMs} ms) = ${seconds(closedForm)}; the ideal-client simulation gives ${seconds(ideal.minimumMs)}`,
      `mock latency ${latency.baseMs} ms + ${latency.perTokenMs} ms per output token, output share ${SHARE} (${shapes[0]!.output} tokens a call)`,
      `the best any client can do is ⌊${LIMIT} / ${cost}⌋ × ${cost} = ${Math.floor(LIMIT / cost) * cost} tokens a window (${percent(ideal.utilization)} utilization)`,
      'baselines: the article’s clients, every call started at once: Semaphore(10) alone, or a limiter in front of each call (its create_limited); SDK default retries (maxRetries 2, honouring retry-after)',
      ...rows
        .filter((r) => r.failed > 0)
        .map((r) => `${r.client} failures: ${JSON.stringify(r.errors)}`),
    ],
  };
}
