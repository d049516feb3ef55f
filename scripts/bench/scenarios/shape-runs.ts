import type { MockAnthropicOptions, MockStats } from '../../../testing/mock-anthropic/index.ts';
import { type LlmqRun, type LlmqRunOptions, runLlmq } from '../llmq-runner.ts';
import { withMock } from '../mock.ts';
import type { ScenarioContext } from '../report.ts';
import { roundingFor, SHAPES, type Shape, shapeLabel } from '../shapes.ts';
import { count, ratio, seconds } from '../table.ts';
import { latencyFor, windowMsFor } from '../workload.ts';

/**
 * A scenario limited on input tokens alone: the mock (reserve accounting, answers `share` of
 * max_tokens) and the ideal client's budget, at the window and latency of the run's mode.
 */
export function inputLimited(
  ctx: ScenarioContext,
  limit: number,
  share: number,
  concurrency: number,
) {
  const windowMs = windowMsFor(ctx.quick);
  const latency = latencyFor(ctx.quick);
  const mock: MockAnthropicOptions = {
    ...ctx.counting,
    windowMs,
    limits: { inputTokens: limit },
    outputAccounting: 'reserve',
    latencyMs: latency.baseMs,
    latencyPerOutputTokenMs: latency.perTokenMs,
    outputShare: share,
  };
  const budget = {
    limits: { input: limit },
    windowMs,
    concurrency,
    accounting: 'reserve',
  } as const;
  return { windowMs, latency, mock, budget };
}

/** One llmq run against the mock in one shape. */
export interface ShapeRun {
  readonly shape: Shape;
  readonly client: string;
  readonly run: LlmqRun;
  readonly stats: MockStats;
  /** From the mock's first admission to its last. */
  readonly spanMs: number;
}

export interface ShapeRunsOptions
  extends Pick<LlmqRunOptions, 'requests' | 'limiter' | 'concurrency' | 'maxInFlight'> {
  readonly scenario: string;
  /** The mock's options; its shape and rounded readings are set per run. */
  readonly mock: MockAnthropicOptions;
  /** The limit whose 40th the readings are rounded to. */
  readonly limit: number;
}

/**
 * llmq (one worker in this process) against the mock as a sliding window and as a token
 * bucket, its token readings rounded as the API rounds them: one run per shape.
 */
export async function llmqOnEachShape(
  ctx: ScenarioContext,
  o: ShapeRunsOptions,
): Promise<ShapeRun[]> {
  const out: ShapeRun[] = [];
  for (const shape of SHAPES) {
    const client = `llmq, ${shapeLabel(shape)}`;
    ctx.log(`${o.scenario}: ${client}`);
    const mock = { ...o.mock, algorithm: shape, roundReadings: roundingFor(o.limit) };
    await withMock(mock, async (m) => {
      const run = await runLlmq({
        redisUrl: ctx.redisUrl,
        scope: o.scenario,
        mockUrl: m.url,
        requests: o.requests,
        limiter: o.limiter,
        maxInFlight: o.maxInFlight,
        workers: { count: 1, where: 'in-process' },
        concurrency: o.concurrency,
        counting: ctx.counting,
      });
      const stats = await m.stats();
      const spanMs = (stats.lastAdmissionAt ?? 0) - (stats.firstAdmissionAt ?? 0);
      out.push({ shape, client, run, stats, spanMs });
    });
  }
  return out;
}

export const SPAN_HEADERS = [
  'client',
  'completed',
  '429s',
  'attempts',
  'admission span',
  'bound',
  'span / bound',
  'wall',
] as const;

/** A run's row against the least admission span any client could reach on its shape. */
export function spanCells(r: ShapeRun, total: number, boundMs: number): string[] {
  return [
    r.client,
    `${r.run.completed}/${total}`,
    count(r.stats.responses['429'] ?? 0),
    count(r.stats.attempts),
    seconds(r.spanMs),
    seconds(boundMs),
    ratio(r.spanMs / boundMs),
    seconds(r.run.wallMs),
  ];
}
