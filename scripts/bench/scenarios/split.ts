import type { InputCounting, MockAnthropicOptions } from '../../../testing/mock-anthropic/index.ts';
import { type CallShape, fluidMinimumMs, idealSchedule } from '../budget.ts';
import { type LlmqRun, runLlmq } from '../llmq-runner.ts';
import { withMock } from '../mock.ts';
import type { ScenarioContext, ScenarioResult } from '../report.ts';
import { count, percent, ratio, seconds } from '../table.ts';
import {
  type BenchRequest,
  DIFFERING_COUNTER,
  type Latency,
  latencyFor,
  splitCalls,
  windowMsFor,
} from '../workload.ts';

const ITPM = 12_000;
const OTPM = 8_000;
const RPM = 120;
const PROCESSES = 4;
const CONCURRENCY = 20;

interface SplitRow {
  readonly client: string;
  readonly counter: string;
  readonly run: Omit<LlmqRun, 'calls' | 'processes'>;
  readonly rateLimited: number;
  readonly attempts: number;
  readonly idealMs: number;
  readonly fluidMs: number;
  readonly worstWindow: {
    readonly input: number;
    readonly output: number;
    readonly requests: number;
  };
}

/**
 * Issue 21's fleet: 4 worker processes × 5, 120 requests mixing 15–1,500 input and 50–1,500
 * max_tokens, ITPM 12,000 + OTPM 8,000 + RPM 120 per window, output 25–100% of max_tokens given
 * back when it ends (`actual`), estimates only (no count_tokens). Run against the mock's own
 * tokenizer and against a counter unlike llmq's estimate (characters / 3.6 + 7 a message), with
 * no other client on the key: the foreign spend llmq counts is a phantom.
 */
export async function splitScenario(ctx: ScenarioContext): Promise<ScenarioResult> {
  const windowMs = windowMsFor(ctx.quick);
  const W = windowMs / 1000;
  const latency = latencyFor(ctx.quick);
  const requests = splitCalls(ctx.quick ? 30 : 120);
  const limits = { inputTokens: ITPM, outputTokens: OTPM, requests: RPM };
  const counters: [string, InputCounting][] = [
    ['the mock tokenizer', {}],
    ['characters / 3.6 + 7', DIFFERING_COUNTER],
  ];
  const rows: SplitRow[] = [];
  for (const [counter, counting] of counters) {
    const mockOptions: MockAnthropicOptions = {
      windowMs,
      limits,
      algorithm: 'sliding',
      outputAccounting: 'actual',
      latencyMs: latency.baseMs,
      latencyPerOutputTokenMs: latency.perTokenMs,
      outputShare: [0.25, 1],
      ...counting,
    };
    const client = `llmq, ${PROCESSES} worker processes × ${CONCURRENCY / PROCESSES}`;
    ctx.log(`split: ${client}, input counted as ${counter}`);
    await withMock(mockOptions, async (mock) => {
      const run = await runLlmq({
        redisUrl: ctx.redisUrl,
        scope: 'split',
        mockUrl: mock.url,
        requests,
        limiter: { windowMs, limits, outputAccounting: 'actual' },
        maxInFlight: CONCURRENCY,
        workers: { count: PROCESSES, where: 'processes' },
        concurrency: CONCURRENCY / PROCESSES,
        recordOutput: true,
        watchLimiter: true,
      });
      const shapes = exactShapes(requests, run, latency);
      const budget = {
        limits: { input: ITPM, output: OTPM, requests: RPM },
        windowMs,
        concurrency: CONCURRENCY,
        accounting: 'actual',
      } as const;
      const stats = await mock.stats();
      const { calls, processes: _p, ...rest } = run;
      rows.push({
        client,
        counter,
        run: rest,
        rateLimited: calls.statuses['429'] ?? 0,
        attempts: calls.attempts,
        idealMs: idealSchedule(shapes, budget).minimumMs,
        fluidMs: fluidMinimumMs(shapes, budget),
        worstWindow: {
          input: stats.worstWindow.input_tokens,
          output: stats.worstWindow.output_tokens,
          requests: stats.worstWindow.requests,
        },
      });
    });
  }

  const pct = (v: number | undefined, limit: number) => percent((v ?? Number.NaN) / limit);
  const differing = rows[rows.length - 1]!;
  const w = differing.run.limiterWatch;
  return {
    name: 'split',
    title: `${requests.length} requests of 15–1,500 input and 50–1,500 max_tokens, ${count(ITPM)} input + ${count(OTPM)} output tokens + ${RPM} requests per sliding ${W} s window, unused output given back, ${CONCURRENCY} at once`,
    settings: { requests: requests.length, limits, windowMs, processes: PROCESSES },
    headers: [
      'input counted as',
      'completed',
      '429s',
      'attempts',
      'wall',
      'wall / ideal',
      'wall / fluid',
      'worst in / out / req',
      'foreign in / out / req (mean)',
      'foreign (max)',
      'accuracy (after 50)',
    ],
    rows: rows.map((r) => {
      const f = r.run.limiterWatch;
      return [
        r.counter,
        `${r.run.completed}/${requests.length}`,
        count(r.rateLimited),
        count(r.attempts),
        seconds(r.run.wallMs),
        ratio(r.run.wallMs / r.idealMs),
        ratio(r.run.wallMs / r.fluidMs),
        `${count(r.worstWindow.input)} / ${count(r.worstWindow.output)} / ${count(r.worstWindow.requests)}`,
        `${pct(f?.foreignMean.inputTokens, ITPM)} / ${pct(f?.foreignMean.outputTokens, OTPM)} / ${pct(f?.foreignMean.requests, RPM)}`,
        `${count(f?.foreignMax.inputTokens)} / ${count(f?.foreignMax.outputTokens)} / ${count(f?.foreignMax.requests)}`,
        `${percent(f?.accuracy)} (${percent(f?.accuracyAfter50)})`,
      ];
    }),
    figures: rows,
    targets: [
      {
        name: 'zero 429s and at most 1.05× the ideal client, with the differing counter',
        met:
          differing.rateLimited === 0 &&
          differing.run.completed === requests.length &&
          differing.run.wallMs <= 1.05 * differing.idealMs,
        detail: `${differing.rateLimited} 429s, ${seconds(differing.run.wallMs)} against ${seconds(differing.idealMs)} (${ratio(differing.run.wallMs / differing.idealMs)})`,
      },
      {
        name: 'estimate accuracy (actual / reserved input) at least 90% after the first 50 calls',
        met: (w?.accuracyAfter50 ?? 0) >= 0.9,
        detail: percent(w?.accuracyAfter50),
      },
      {
        name: 'foreign spend alone under 1% of each limit on average',
        met:
          w !== undefined &&
          w.foreignMean.inputTokens < 0.01 * ITPM &&
          w.foreignMean.outputTokens < 0.01 * OTPM &&
          w.foreignMean.requests < 0.01 * RPM,
        detail: `input ${count(w?.foreignMean.inputTokens)}, output ${count(w?.foreignMean.outputTokens)}, requests ${(w?.foreignMean.requests ?? Number.NaN).toFixed(2)} on average`,
      },
    ],
    notes: [
      `ideal: a first-come-first-served client that knows every charge as the provider counts it (input, and the output each call produced, read from the responses), ${CONCURRENCY} at once, giving unused output back when a call ends; fluid: the limits alone (budget.ts)`,
      `foreign: the limiter's count of another client's spend (llmq status), sampled every 100 ms; no other client exists here; accuracy: the provider's input over llmq's reserved input, of the settled calls`,
      `mock latency ${latency.baseMs} ms + ${latency.perTokenMs} ms per output token; output 25–100% of max_tokens, per request`,
    ],
  };
}

/** Each request with the input and output the provider counted for it (from the run's responses). */
function exactShapes(
  requests: readonly BenchRequest[],
  run: LlmqRun,
  latency: Latency,
): CallShape[] {
  const byKey = new Map(run.calls.admitted.map((c) => [c.key, c]));
  return requests.map((r) => {
    const seen = byKey.get(r.messages[0]!.content.slice(0, 12));
    const output = seen?.output ?? r.max_tokens;
    return {
      input: seen?.input ?? 0,
      maxTokens: r.max_tokens,
      output,
      latencyMs: latency.baseMs + latency.perTokenMs * output,
    };
  });
}
