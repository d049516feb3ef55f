import type { MockAnthropicOptions } from '../../../testing/mock-anthropic/index.ts';
import { fluidMinimumMs, idealSchedule } from '../budget.ts';
import { runLlmq } from '../llmq-runner.ts';
import { withMock } from '../mock.ts';
import type { ScenarioContext, ScenarioResult } from '../report.ts';
import { roundingFor, SHAPES, type Shape, shapeLabel } from '../shapes.ts';
import { count, megabytes, ratio, seconds } from '../table.ts';
import { latencyFor, mixedCalls, shapesOf, windowMsFor } from '../workload.ts';
import { RATE_HEADERS, type RateRow, rateCells, rateRow } from './rate-rows.ts';

/** Requests, input and output tokens per window: each binds for about as many windows. */
const LIMITS = { requests: 15, inputTokens: 3_000, outputTokens: 18_000 } as const;
const SHARE = 0.5;
const PROCESSES = 4;
const CONCURRENCY = 20;

/**
 * Full load from several processes: a mix of small and large requests (100 to 8,000 tokens)
 * under limits of requests, input and output tokens per 10 s (no total), 20 calls at once,
 * for about seven windows, against a sliding window and a token bucket with readings rounded
 * as the API's. llmq runs four worker processes; the ideal first-come-first-served client of
 * the same order is the measure.
 */
export async function fleetScenario(ctx: ScenarioContext): Promise<ScenarioResult> {
  const windowMs = windowMsFor(ctx.quick);
  const W = windowMs / 1000;
  const latency = latencyFor(ctx.quick);
  const requests = mixedCalls(ctx.quick ? 30 : 100);
  const shapes = shapesOf(requests, SHARE, latency, ctx.counting);
  const budget = {
    limits: { requests: LIMITS.requests, input: LIMITS.inputTokens, output: LIMITS.outputTokens },
    windowMs,
    concurrency: CONCURRENCY,
    accounting: 'reserve',
  } as const;
  const mockOptions: MockAnthropicOptions = {
    ...ctx.counting,
    windowMs,
    limits: LIMITS,
    outputAccounting: 'reserve',
    latencyMs: latency.baseMs,
    latencyPerOutputTokenMs: latency.perTokenMs,
    outputShare: SHARE,
    // A 40th of the smallest token limit, as the API rounds 1,000 of 40,000: a step every
    // limit is a multiple of, as the API's limits are of its 1,000.
    roundReadings: roundingFor(LIMITS.inputTokens),
  };
  const rows: RateRow[] = [];
  const ideals = {} as Record<Shape, number>;
  let peakRss = 0;
  for (const shape of SHAPES) {
    const client = `llmq, ${PROCESSES} worker processes × ${CONCURRENCY / PROCESSES}, ${shapeLabel(shape)}`;
    ctx.log(`fleet: ${client}`);
    const ideal = idealSchedule(shapes, { ...budget, shape });
    ideals[shape] = ideal.minimumMs;
    await withMock({ ...mockOptions, algorithm: shape }, async (mock) => {
      const run = await runLlmq({
        redisUrl: ctx.redisUrl,
        scope: 'fleet',
        mockUrl: mock.url,
        requests,
        counting: ctx.counting,
        limiter: { windowMs, limits: LIMITS, outputAccounting: 'reserve' },
        maxInFlight: CONCURRENCY,
        workers: { count: PROCESSES, where: 'processes' },
        concurrency: CONCURRENCY / PROCESSES,
      });
      peakRss = Math.max(peakRss, ...run.processes.map((p) => p.peakRssBytes));
      rows.push(
        rateRow({
          client,
          run,
          calls: run.calls,
          stats: await mock.stats(),
          total: requests.length,
          limit: LIMITS.outputTokens,
          windowMs,
          accounting: 'reserve',
          minimumMs: ideal.minimumMs,
          fluidMs: fluidMinimumMs(shapes, { ...budget, shape }),
          dimension: 'output',
        }),
      );
    });
  }
  const [sliding, bucket] = rows as [RateRow, RateRow];
  const input = shapes.reduce((s, c) => s + c.input, 0);
  const output = shapes.reduce((s, c) => s + c.maxTokens, 0);
  return {
    name: 'fleet',
    title: `${requests.length} requests of 100 to 8,000 tokens (${count(input)} input, ${count(output)} max_tokens), ${LIMITS.requests} requests, ${count(LIMITS.inputTokens)} input and ${count(LIMITS.outputTokens)} output tokens per ${W} s, 20 at once`,
    settings: {
      mock: mockOptions,
      requests: requests.length,
      processes: PROCESSES,
      concurrency: CONCURRENCY,
      minimumMs: ideals,
      workerPeakRssBytes: peakRss,
    },
    headers: RATE_HEADERS,
    rows: rows.map(rateCells),
    figures: rows,
    targets: [
      {
        name: 'llmq with several worker processes draws zero 429s, on both shapes',
        met: rows.every((r) => r.rateLimited === 0 && r.completed === requests.length),
        detail: rows
          .map((r) => `${r.client}: ${r.rateLimited} 429s, ${r.completed}/${requests.length}`)
          .join('; '),
      },
      {
        name: 'llmq within 1.05× the ideal client, on both shapes',
        met: sliding.wallOverMinimum <= 1.05 && bucket.wallOverMinimum <= 1.05,
        detail: `sliding ${seconds(sliding.wallMs)} against ${seconds(ideals.sliding)} (${ratio(sliding.wallOverMinimum)}); bucket ${seconds(bucket.wallMs)} against ${seconds(ideals.bucket)} (${ratio(bucket.wallOverMinimum)})`,
      },
    ],
    notes: [
      `mix: 60% of 100–600 tokens, 30% of 600–3,000, 10% of 3,000–8,000 (a tenth of each input, the rest max_tokens), fixed seed; answers half of max_tokens; mock latency ${latency.baseMs} ms + ${latency.perTokenMs} ms per output token; readings rounded to ${roundingFor(LIMITS.inputTokens)}`,
      `minimum: the ideal client (20 at once, first come first served, no overhead, every charge known) ${seconds(ideals.sliding)} against the sliding window, ${seconds(ideals.bucket)} against the bucket`,
      'utilization and worst window are of the output tokens limit; estimates only: input estimated from the text, erring high, learned down as the fleet settles',
      `llmq worker peak RSS ${megabytes(peakRss)}`,
      ...rows
        .filter((r) => r.failed > 0)
        .map((r) => `${r.client} failures: ${JSON.stringify(r.errors)}`),
    ],
  };
}
