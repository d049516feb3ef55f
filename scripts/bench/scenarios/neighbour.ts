import { setTimeout as sleep } from 'node:timers/promises';
import Anthropic from '@anthropic-ai/sdk';
import type { InputCounting, MockAnthropicOptions } from '../../../testing/mock-anthropic/index.ts';
import { fluidMinimumMs, idealSchedule } from '../budget.ts';
import { runLlmq, tokenBudget } from '../llmq-runner.ts';
import { withMock } from '../mock.ts';
import { CallRecorder, type RecorderReport } from '../recorder.ts';
import type { ScenarioContext, ScenarioResult } from '../report.ts';
import { count, percent, seconds } from '../table.ts';
import {
  costAtMock,
  DIFFERING_COUNTER,
  latencyFor,
  shapesOf,
  shortCall,
  sizedCall,
  windowMsFor,
} from '../workload.ts';
import { RATE_HEADERS, type RateRow, rateCells, rateRow } from './rate-rows.ts';

const LIMIT = 20_000;
const SHARE = 0.5;
const CONCURRENCY = 10;
/** The neighbour's request: 1,500 tokens, four times a window: 30% of the limit. */
const NEIGHBOUR_TOKENS = 1_500;
const NEIGHBOUR_PER_WINDOW = 4;
/** Runs with feedback (the target holds on every one), full and `--quick`; one without. */
const RUNS = { full: 5, quick: 1 } as const;

interface NeighbourRun {
  readonly sent: number;
  readonly completed: number;
  readonly failed: number;
  readonly wallMs: number;
  readonly calls: RecorderReport;
}

/**
 * Another client of the same key: a plain SDK loop (default retries), one call every quarter
 * window, that knows nothing of llmq. It runs until `signal` aborts.
 */
async function runNeighbour(
  mockUrl: string,
  windowMs: number,
  signal: AbortSignal,
  counting: InputCounting | undefined,
): Promise<NeighbourRun> {
  const recorder = new CallRecorder({ counting });
  const client = new Anthropic({
    apiKey: 'neighbour-key',
    baseURL: mockUrl,
    fetch: recorder.fetch,
  });
  const every = windowMs / NEIGHBOUR_PER_WINDOW;
  let sent = 0;
  let completed = 0;
  let failed = 0;
  const t0 = performance.now();
  while (!signal.aborted) {
    const started = performance.now();
    sent++;
    try {
      await client.messages.create(
        sizedCall(
          100_000 + sent,
          NEIGHBOUR_TOKENS,
        ) as unknown as Anthropic.MessageCreateParamsNonStreaming,
      );
      completed++;
    } catch {
      failed++;
    }
    await sleep(Math.max(0, every - (performance.now() - started)), undefined, { signal }).catch(
      () => {},
    );
  }
  return {
    sent,
    completed,
    failed,
    wallMs: performance.now() - t0,
    calls: await recorder.report(),
  };
}

/**
 * llmq sharing its key with an outside client that spends about 30% of the budget: with the
 * provider's rate-limit headers fed back to the limiter (the default) and without.
 */
export async function neighbourScenario(ctx: ScenarioContext): Promise<ScenarioResult> {
  const windowMs = windowMsFor(ctx.quick);
  const W = windowMs / 1000;
  const latency = latencyFor(ctx.quick);
  const calls = ctx.quick ? 120 : 170;
  // Issue 21: the provider counts unlike llmq's estimate here, whatever --counter says.
  const counting = ctx.counting ?? DIFFERING_COUNTER;
  const requests = Array.from({ length: calls }, (_, i) => shortCall(i, 400));
  // llmq's minimum: the ideal client's on what the neighbour left it in that run (its measured
  // share of the limit per window).
  const shapes = shapesOf(requests, SHARE, latency, counting);
  const budgetOn = (neighbourShare: number) =>
    ({
      limits: {
        tokens: Math.round(LIMIT * (1 - (Number.isFinite(neighbourShare) ? neighbourShare : 0))),
      },
      windowMs,
      concurrency: CONCURRENCY,
      accounting: 'reserve',
    }) as const;
  const minimums: number[] = [];
  const mockOptions: MockAnthropicOptions = {
    ...counting,
    windowMs,
    limits: { tokens: LIMIT },
    algorithm: 'sliding',
    outputAccounting: 'reserve',
    latencyMs: latency.baseMs,
    latencyPerOutputTokenMs: latency.perTokenMs,
    outputShare: SHARE,
  };
  const rows: RateRow[] = [];
  const runs = ctx.quick ? RUNS.quick : RUNS.full;
  const plan = [...Array.from({ length: runs }, () => true), false];
  await withMock(mockOptions, async (mock) => {
    for (const [k, feedback] of plan.entries()) {
      const client = feedback
        ? `llmq with provider feedback${runs > 1 ? `, run ${k + 1}` : ''}`
        : 'llmq without feedback';
      ctx.log(`neighbour: ${client}`);
      await mock.reset();
      const stop = new AbortController();
      const neighbour = runNeighbour(mock.url, windowMs, stop.signal, counting);
      // Let the neighbour take its share first, as a client that was already there.
      await sleep(windowMs / 2);
      const run = await runLlmq({
        redisUrl: ctx.redisUrl,
        scope: 'neighbour',
        mockUrl: mock.url,
        requests,
        counting: counting,
        ...tokenBudget(windowMs, LIMIT, CONCURRENCY),
        workers: { count: 1, where: 'in-process' },
        concurrency: CONCURRENCY,
        feedback,
      }).finally(() => stop.abort());
      const n = await neighbour;
      const stats = await mock.stats();
      const common = { limit: LIMIT, windowMs, accounting: 'reserve' as const, stats };
      const nb = rateRow({
        ...common,
        client: '  the neighbour meanwhile',
        run: { completed: n.completed, failed: n.failed, wallMs: n.wallMs, errors: {} },
        calls: n.calls,
        total: n.sent,
        minimumMs: Number.NaN,
      });
      const budget = budgetOn(nb.utilization);
      const minimumMs = idealSchedule(shapes, budget).minimumMs;
      const fluidMs = fluidMinimumMs(shapes, budget);
      minimums.push(minimumMs);
      rows.push(
        rateRow({ ...common, client, run, calls: run.calls, total: calls, minimumMs, fluidMs }),
        nb,
      );
    }
  });

  const llmqRows = rows.filter((_, i) => i % 2 === 0);
  const fbRows = llmqRows.slice(0, runs);
  const withoutFb = llmqRows[runs]!;
  const share = (r: RateRow) => r.rateLimited / Math.max(1, r.attempts);
  const worst = fbRows.reduce((a, b) => (share(b) > share(a) ? b : a));
  const nbWith = rows[1]!;
  const neighbourShare = (r: RateRow) => r.utilization;
  return {
    name: 'neighbour',
    title: `${calls} llmq calls of ${costAtMock(requests[0]!, counting)} tokens while another client spends ~30% of ${LIMIT} tokens per sliding ${W} s window, input counted as characters / 3.6 + 7`,
    settings: {
      mock: mockOptions,
      calls,
      neighbour: { tokensPerCall: NEIGHBOUR_TOKENS, callsPerWindow: NEIGHBOUR_PER_WINDOW },
      minimumMs: minimums,
      runs,
    },
    headers: RATE_HEADERS,
    rows: rows.map(rateCells),
    figures: rows,
    targets: [
      {
        name: `with feedback, 429s under 1% of llmq's attempts${runs > 1 ? ` on every one of ${runs} runs` : ''}`,
        met: fbRows.every((r) => share(r) < 0.01),
        detail: `${fbRows.map((r) => `${r.rateLimited} of ${count(r.attempts)}`).join(', ')}; worst ${percent(share(worst), 2)}; without feedback ${withoutFb.rateLimited} of ${count(withoutFb.attempts)}`,
      },
    ],
    notes: [
      `the neighbour: a plain SDK loop (default retries), one ${NEIGHBOUR_TOKENS}-token call every ${seconds(windowMs / NEIGHBOUR_PER_WINDOW)}, started half a window before llmq; its utilization column is its own share of the limit (${percent(neighbourShare(nbWith))} during the first feedback run)`,
      `minimum: the ideal client (10 at once) on what the neighbour left in that run (the limit less the neighbour's share): ${minimums.map((m) => seconds(m)).join(', ')}`,
      "utilization per row is that client's own tokens per window; worst window / limit is the mock's, both clients together",
      ...rows
        .filter((r) => r.failed > 0)
        .map(
          (r) =>
            `${r.client.trim()} failures: ${r.failed}${Object.keys(r.errors).length > 0 ? ` ${JSON.stringify(r.errors)}` : ''}`,
        ),
    ],
  };
}
