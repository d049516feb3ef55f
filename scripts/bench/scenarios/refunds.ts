import type { MockAnthropicOptions } from '../../../testing/mock-anthropic/index.ts';
import { type Accounting, fluidMinimumMs, idealSchedule } from '../budget.ts';
import { runBaselineClient } from '../clients/run-baseline.ts';
import { SlidingWindow } from '../clients/sliding-window.ts';
import { runLlmq, tokenBudget } from '../llmq-runner.ts';
import { withMock } from '../mock.ts';
import { type AdmittedCall, CallRecorder } from '../recorder.ts';
import type { ScenarioContext, ScenarioResult } from '../report.ts';
import { roundingFor, SHAPES, type Shape, shapeLabel } from '../shapes.ts';
import { percent, percentile, ratio, seconds } from '../table.ts';
import { costAtMock, latencyFor, shapesOf, shortCall, windowMsFor } from '../workload.ts';
import { RATE_HEADERS, type RateRow, rateCells, rateRow } from './rate-rows.ts';

/** One llmq run: the provider's shape and output accounting, and the accounting llmq is told. */
interface LlmqRefundsRun {
  readonly shape: Shape;
  readonly accounting: Accounting;
  readonly provider: Accounting;
}

const LLMQ_LABELS: Record<Accounting, string> = {
  actual: 'reconciling usage (actual)',
  reserve: 'not reconciling (reserve)',
  produced: 'output charged as produced (produced)',
};

const LIMIT = 4_000;
const SHARE = 0.2;
const CONCURRENCY = 10;

/**
 * The published workload against a provider that gives unused output back when a response ends
 * (`actual` accounting), with answers a fifth of max_tokens long: the article's best client (a
 * sliding window that keeps max_tokens reserved) against llmq reconciling each call's usage.
 * Then llmq against a provider that charges output as it is produced (`produced`, the API today).
 */
export async function refundsScenario(ctx: ScenarioContext): Promise<ScenarioResult> {
  const windowMs = windowMsFor(ctx.quick);
  const W = windowMs / 1000;
  const calls = ctx.quick ? 40 : 150;
  const latency = latencyFor(ctx.quick);
  const requests = Array.from({ length: calls }, (_, i) => shortCall(i));
  const shapes = shapesOf(requests, SHARE, latency, ctx.counting);
  const budget = {
    limits: { tokens: LIMIT },
    windowMs,
    concurrency: CONCURRENCY,
    accounting: 'actual',
  } as const;
  const ideal = idealSchedule(shapes, budget);
  const fluidMs = fluidMinimumMs(shapes, budget);
  const mockOptions: MockAnthropicOptions = {
    ...ctx.counting,
    windowMs,
    limits: { tokens: LIMIT },
    algorithm: 'sliding',
    outputAccounting: 'actual',
    latencyMs: latency.baseMs,
    latencyPerOutputTokenMs: latency.perTokenMs,
    outputShare: SHARE,
  };
  const common = {
    total: calls,
    limit: LIMIT,
    windowMs,
    accounting: 'actual' as const,
    minimumMs: ideal.minimumMs,
    fluidMs,
  };
  const rows: RateRow[] = [];
  const reconciling: AdmittedCall[][] = [];

  const swClient = `client sliding window (${LIMIT} / ${W} s), no reconciliation`;
  await withMock(mockOptions, async (mock) => {
    ctx.log(`refunds: ${swClient}`);
    const recorder = new CallRecorder({ output: true, counting: ctx.counting });
    const run = await runBaselineClient({
      mockUrl: mock.url,
      requests,
      limiter: new SlidingWindow(LIMIT, W),
      recorder,
    });
    rows.push(
      rateRow({
        ...common,
        client: swClient,
        run,
        calls: await recorder.report(),
        stats: await mock.stats(),
      }),
    );
  });
  // llmq reconciling, against each shape, and not reconciling for reference (sliding); then
  // against a provider that charges output as it is produced (the API today), on each shape.
  const runs: readonly LlmqRefundsRun[] = [
    ...SHAPES.map((shape) => ({
      shape,
      accounting: 'actual' as const,
      provider: 'actual' as const,
    })),
    { shape: 'sliding', accounting: 'reserve', provider: 'actual' },
    ...SHAPES.map((shape) => ({
      shape,
      accounting: 'produced' as const,
      provider: 'produced' as const,
    })),
  ];
  const llmqRows: RateRow[] = [];
  const ideals: number[] = [];
  const producedRows: RateRow[] = [];
  const producedIdeals: number[] = [];
  for (const { shape, accounting, provider } of runs) {
    const client = `llmq, ${LLMQ_LABELS[accounting]}, ${shapeLabel(shape)}`;
    ctx.log(`refunds: ${client}`);
    const shaped = {
      ...mockOptions,
      algorithm: shape,
      outputAccounting: provider,
      roundReadings: roundingFor(LIMIT),
    };
    await withMock(shaped, async (mock) => {
      const run = await runLlmq({
        redisUrl: ctx.redisUrl,
        scope: 'refunds',
        mockUrl: mock.url,
        requests,
        counting: ctx.counting,
        ...tokenBudget(windowMs, LIMIT, CONCURRENCY, accounting),
        workers: { count: 1, where: 'in-process' },
        concurrency: CONCURRENCY,
        recordOutput: true,
      });
      if (accounting === 'actual') reconciling.push([...run.calls.admitted]);
      const asProvider = { ...budget, shape, accounting: provider };
      const minimumMs = idealSchedule(shapes, asProvider).minimumMs;
      const row = rateRow({
        ...common,
        accounting: provider,
        minimumMs,
        fluidMs: fluidMinimumMs(shapes, asProvider),
        client,
        run,
        calls: run.calls,
        stats: await mock.stats(),
      });
      rows.push(row);
      if (provider === 'produced') {
        producedRows.push(row);
        producedIdeals.push(minimumMs);
      } else {
        llmqRows.push(row);
        if (accounting === 'actual') ideals.push(minimumMs);
      }
    });
  }

  const sw = rows[0]!;
  const [llmq, bucket] = llmqRows as [RateRow, RateRow, RateRow];
  const [producedSliding, producedBucket] = producedRows as [RateRow, RateRow];
  const speedup = sw.wallMs / llmq.wallMs;
  // The same ideal client with each call as long as llmq's calls took here (the median, send to
  // body read), on each shape: what the machine's speed, not llmq's scheduling, adds to the wall.
  const asLong = SHAPES.map((shape, i) => {
    const calls = (reconciling[i] ?? []).filter((c) => c.endedAt !== undefined);
    const tookMs = percentile(
      calls.map((c) => c.endedAt! - c.at),
      50,
    );
    const sh = shapes.map((x) => ({ ...x, latencyMs: tookMs }));
    const ms = Number.isFinite(tookMs) ? idealSchedule(sh, { ...budget, shape }).minimumMs : NaN;
    const wall = (i === 0 ? llmq : bucket).wallMs;
    return `${shapeLabel(shape)} ${seconds(ms)} (median call ${Math.round(tookMs)} ms), llmq ${ratio(wall / ms)} of it`;
  });
  return {
    name: 'refunds',
    title: `${calls} calls of ${costAtMock(requests[0]!, ctx.counting)} tokens answering ${shapes[0]!.output} tokens, ${LIMIT} tokens per ${W} s (sliding window or token bucket), unused output given back, then output charged as produced, readings rounded to ${roundingFor(LIMIT)}`,
    settings: {
      mock: mockOptions,
      calls,
      concurrency: CONCURRENCY,
      minimumMs: ideal.minimumMs,
      idealUtilization: ideal.utilization,
    },
    headers: RATE_HEADERS,
    rows: rows.map(rateCells),
    figures: rows,
    targets: [
      {
        name: 'llmq reconciling finishes at least 1.5× sooner than the client sliding window',
        met: speedup >= 1.5,
        detail: `${seconds(llmq.wallMs)} against ${seconds(sw.wallMs)}: ${ratio(speedup, 2)}`,
      },
      {
        name: 'llmq reconciling draws zero 429s, on both shapes',
        met: llmq.rateLimited === 0 && bucket.rateLimited === 0,
        detail: `sliding ${llmq.rateLimited}, bucket ${bucket.rateLimited} 429s`,
      },
      {
        name: 'llmq reconciling within 1.05× the ideal client, on both shapes',
        met: llmq.wallOverMinimum <= 1.05 && bucket.wallOverMinimum <= 1.05,
        detail: `sliding ${seconds(llmq.wallMs)} against ${seconds(ideals[0]!)} (${ratio(llmq.wallOverMinimum)}); bucket ${seconds(bucket.wallMs)} against ${seconds(ideals[1]!)} (${ratio(bucket.wallOverMinimum)})`,
      },
      {
        name: 'output charged as produced: llmq draws zero 429s, on both shapes',
        met: producedSliding.rateLimited === 0 && producedBucket.rateLimited === 0,
        detail: `sliding ${producedSliding.rateLimited}, bucket ${producedBucket.rateLimited} 429s`,
      },
      {
        name: 'output charged as produced: llmq within 1.05× the ideal client, on both shapes',
        met: producedSliding.wallOverMinimum <= 1.05 && producedBucket.wallOverMinimum <= 1.05,
        detail: `sliding ${seconds(producedSliding.wallMs)} against ${seconds(producedIdeals[0]!)} (${ratio(producedSliding.wallOverMinimum)}); bucket ${seconds(producedBucket.wallMs)} against ${seconds(producedIdeals[1]!)} (${ratio(producedBucket.wallOverMinimum)})`,
      },
    ],
    notes: [
      `minimum: the ideal client (10 at once, first come first served) holding input + max_tokens while a call runs and input + output after it: ${seconds(ideal.minimumMs)} against a sliding window (${percent(ideal.utilization)} utilization), ${seconds(ideals[1]!)} against a bucket; see budget.ts`,
      `the ideal client with every call as long as llmq's took here (send to body read; the mock's own ${shapes[0]!.latencyMs} ms): ${asLong.join('; ')}`,
      `output charged as produced (the API today: nothing of max_tokens at admission, the output as it streams): the ideal client ${seconds(producedIdeals[0]!)} against a sliding window, ${seconds(producedIdeals[1]!)} against a bucket. It starts calls beside running ones on their input alone, knowing how much they will have produced; a client that counts a running call's output at max_tokens (llmq: the output to come is pending) can do no better than the reconciling rows' ideal (${seconds(ideals[0]!)}, ${seconds(ideals[1]!)}: llmq ${ratio(producedSliding.wallMs / ideals[0]!)}, ${ratio(producedBucket.wallMs / ideals[1]!)} of it). The mock's worst window books each call's output at its admission, not when it was produced`,
      `utilization counts what stays charged (input + actual output); mock latency ${latency.baseMs} ms + ${latency.perTokenMs} ms per output token`,
      ...rows
        .filter((r) => r.failed > 0)
        .map((r) => `${r.client} failures: ${JSON.stringify(r.errors)}`),
    ],
  };
}
