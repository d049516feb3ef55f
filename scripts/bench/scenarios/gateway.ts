import Anthropic from '@anthropic-ai/sdk';
import { hashApiKey } from '../../../producer/http/api-keys.ts';
import { type HttpApi, startHttpApi } from '../../../producer/http/server.ts';
import { resolveConfig } from '../../../shared/config.ts';
import type { QueueNames } from '../../../shared/keys.ts';
import type { RedisClient } from '../../../shared/redis.ts';
import { createProviderClient } from '../../../worker/provider.ts';
import { startWorker, type WorkerHandle } from '../../../worker/worker.ts';
import { fluidMinimumMs, idealSchedule } from '../budget.ts';
import { type BenchMock, withMock } from '../mock.ts';
import { withBenchScope } from '../redis-scope.ts';
import type { ScenarioContext, ScenarioResult } from '../report.ts';
import { count, millis, percentile, ratio, seconds } from '../table.ts';
import { costAtMock, shapesOf, shortCall, windowMsFor } from '../workload.ts';

const LIMIT = 4_000;
const CLIENTS = 200;
const CONCURRENCY = 50;
/** The share of max_tokens the mock writes (the provider charges all of it: `reserve`). */
const SHARE = 0.5;
/** max_tokens of the latency calls: short answers, so the call itself stays small beside llmq's part. */
const LATENCY_MAX_TOKENS = 16;
const TENANTS = ['acme', 'beta', 'gamma', 'delta'];
const keyOf = (tenant: string) => `sk-bench-${tenant}`;

interface Setup {
  readonly worker: WorkerHandle;
  readonly api: HttpApi;
  close(): Promise<void>;
}

/** A worker and `llmq serve` on one queue, in this process, against the mock. */
async function openSetup(
  ctx: ScenarioContext,
  redis: RedisClient,
  names: QueueNames,
  mock: BenchMock,
  limiter: { windowMs: number; limits: { tokens: number } } | undefined,
): Promise<Setup> {
  const worker = await startWorker({
    redis,
    names,
    client: createProviderClient({ apiKey: 'bench', baseURL: mock.url }),
    limiter: limiter ?? {},
    concurrency: CONCURRENCY,
  });
  const config = resolveConfig({
    flags: {
      queue: names.queue,
      prefix: names.prefix,
      redisUrl: ctx.redisUrl,
      ...(limiter ? { tpm: String(limiter.limits.tokens) } : {}),
    },
    env: { ANTHROPIC_API_KEY: 'bench', ANTHROPIC_BASE_URL: mock.url },
  });
  const api = await startHttpApi({
    config,
    apiKeys: TENANTS.map((t) => `${t}:${hashApiKey(keyOf(t))}`).join(','),
    port: 0,
    // The load's last calls start after about 100 s: no call is given up as too long waiting.
    gateway: { maxWaitMs: 600_000 },
  });
  return {
    worker,
    api,
    close: async () => {
      await api.close();
      await worker.stop(2_000);
    },
  };
}

/** Total time of a plain call and time to the first event of a streamed one, in ms. */
async function timeCalls(
  client: Anthropic,
  n: number,
): Promise<{ total: number[]; first: number[] }> {
  const total: number[] = [];
  const first: number[] = [];
  for (let i = 0; i < n; i++) {
    const params = shortCall(i, LATENCY_MAX_TOKENS) as Anthropic.MessageCreateParamsNonStreaming;
    let t0 = performance.now();
    await client.messages.create(params);
    total.push(performance.now() - t0);
    t0 = performance.now();
    const stream = client.messages.stream(params);
    let at = 0;
    stream.once('streamEvent', () => {
      at = performance.now() - t0;
    });
    await stream.finalMessage();
    first.push(at);
  }
  return { total, first };
}

/**
 * `POST /v1/messages` through `llmq serve`: the latency it adds at free budget (plain total and
 * streamed time to first event, against the SDK calling the mock directly), and 200 SDK clients
 * of four tenants against the published limit (4,000 tokens per window).
 */
export async function gatewayScenario(ctx: ScenarioContext): Promise<ScenarioResult> {
  const samples = ctx.smoke ? 10 : ctx.quick ? 40 : 300;
  const windowMs = windowMsFor(ctx.quick);
  // The published scenario's call, 207 tokens at the mock: calls of a few dozen tokens would
  // measure the estimate's fixed overhead, not the budget.
  const maxTokens = 200;
  const cost = costAtMock(shortCall(0, maxTokens));
  const rows: string[][] = [];
  const figures: object[] = [];
  const targets: ScenarioResult['targets'][number][] = [];

  // 1. Added latency at free budget (no limits, no mock latency).
  ctx.log(`gateway: ${samples} plain and ${samples} streamed calls, direct and through llmq`);
  const latency = await withMock({ latencyMs: 0, latencyPerOutputTokenMs: 0 }, (mock) =>
    withBenchScope(ctx.redisUrl, 'gateway-latency', async (redis, names) => {
      const setup = await openSetup(ctx, redis, names, mock, undefined);
      try {
        const direct = new Anthropic({ apiKey: 'bench', baseURL: mock.url, maxRetries: 0 });
        const via = new Anthropic({ apiKey: keyOf('acme'), baseURL: setup.api.url, maxRetries: 0 });
        await timeCalls(via, 5); // warm-up
        await timeCalls(direct, 5);
        return { direct: await timeCalls(direct, samples), via: await timeCalls(via, samples) };
      } finally {
        await setup.close();
      }
    }),
  );
  const added = (kind: 'total' | 'first', p: number) =>
    percentile(latency.via[kind], p) - percentile(latency.direct[kind], p);
  for (const kind of ['total', 'first'] as const) {
    const label = kind === 'total' ? 'plain call, total' : 'stream, first event';
    const row = {
      measure: label,
      directP50: percentile(latency.direct[kind], 50),
      directP99: percentile(latency.direct[kind], 99),
      viaP50: percentile(latency.via[kind], 50),
      viaP99: percentile(latency.via[kind], 99),
      addedP50: added(kind, 50),
      addedP99: added(kind, 99),
    };
    figures.push(row);
    rows.push([
      label,
      `${millis(row.directP50)} / ${millis(row.directP99)}`,
      `${millis(row.viaP50)} / ${millis(row.viaP99)}`,
      `${millis(row.addedP50)} / ${millis(row.addedP99)}`,
      '',
      '',
    ]);
  }
  targets.push({
    name: 'p99 added to the first event ≤ 10 ms',
    met: added('first', 99) <= 10,
    detail: millis(added('first', 99)),
  });

  // 2. 200 clients of four tenants against the published limit.
  const clients = ctx.smoke ? 20 : ctx.quick ? 60 : CLIENTS;
  const latencyMs = ctx.quick ? 20 : 200;
  const requests = Array.from({ length: clients }, (_, i) => shortCall(i, maxTokens));
  ctx.log(`gateway: ${clients} SDK clients against ${LIMIT} tokens per ${windowMs / 1000} s`);
  const load = await withMock(
    {
      windowMs,
      limits: { tokens: LIMIT },
      algorithm: 'sliding',
      outputAccounting: 'reserve',
      latencyMs,
      latencyPerOutputTokenMs: 0,
      outputShare: SHARE,
    },
    (mock) =>
      withBenchScope(ctx.redisUrl, 'gateway-load', async (redis, names) => {
        const setup = await openSetup(ctx, redis, names, mock, {
          windowMs,
          limits: { tokens: LIMIT },
        });
        try {
          const sdks = TENANTS.map(
            (t) =>
              new Anthropic({
                apiKey: keyOf(t),
                baseURL: setup.api.url,
                maxRetries: 0,
                timeout: 600_000,
              }),
          );
          const t0 = performance.now();
          const settled = await Promise.allSettled(
            Array.from({ length: clients }, (_, i) =>
              sdks[i % sdks.length]!.messages.create(
                requests[i] as Anthropic.MessageCreateParamsNonStreaming,
              ),
            ),
          );
          const wallMs = performance.now() - t0;
          const stats = await mock.stats();
          return {
            wallMs,
            answered: settled.filter((s) => s.status === 'fulfilled').length,
            callerErrors: settled.filter((s) => s.status === 'rejected').length,
            provider429: stats.responses['429'] ?? 0,
          };
        } finally {
          await setup.close();
        }
      }),
  );
  // The target is against the ideal client (same calls, first come first served, no overhead,
  // every charge known); the fluid minimum, which no client can beat, is shown beside it.
  const shapes = shapesOf(requests, SHARE, { baseMs: latencyMs, perTokenMs: 0 });
  const budget = {
    limits: { tokens: LIMIT },
    windowMs,
    concurrency: CONCURRENCY,
    accounting: 'reserve',
  } as const;
  const minimumMs = idealSchedule(shapes, budget).minimumMs;
  const fluidMs = fluidMinimumMs(shapes, budget);
  const vsMinimum = load.wallMs / minimumMs;
  figures.push({
    measure: 'load',
    clients,
    cost,
    ...load,
    minimumMs,
    fluidMs,
    vsMinimum,
    vsFluid: load.wallMs / fluidMs,
  });
  rows.push([
    `${clients} clients, ${TENANTS.length} tenants`,
    '',
    '',
    '',
    `${count(load.answered)} answered, ${count(load.callerErrors)} errors, ${count(load.provider429)} provider 429s`,
    `${seconds(load.wallMs)} = ${ratio(vsMinimum)} ideal ${seconds(minimumMs)} (${ratio(load.wallMs / fluidMs)} fluid ${seconds(fluidMs)})`,
  ]);
  targets.push(
    { name: 'zero provider 429s', met: load.provider429 === 0, detail: String(load.provider429) },
    {
      name: 'every call answered',
      met: load.callerErrors === 0,
      detail: `${load.answered}/${clients}`,
    },
    {
      name: 'wall ≤ 1.05× the ideal client',
      met: load.callerErrors === 0 && vsMinimum <= 1.05,
      detail: ratio(vsMinimum),
    },
  );
  return {
    name: 'gateway',
    title: 'POST /v1/messages through llmq serve: added latency, and 200 clients under one budget',
    settings: {
      samples,
      windowMs,
      limit: LIMIT,
      clients,
      latencyMaxTokens: LATENCY_MAX_TOKENS,
      maxTokens,
      costAtMock: cost,
    },
    headers: [
      'measure',
      'direct p50 / p99',
      'llmq p50 / p99',
      'added p50 / p99',
      'calls',
      'wall vs minimum',
    ],
    rows,
    figures,
    targets,
    notes: [
      'Worker, gateway and SDK clients share this process (the mock runs in its own); the added latency includes that contention.',
      `The load's target is the ideal client (budget.ts: the same calls in order, no overhead, every charge known) at the worker concurrency of ${CONCURRENCY}; the fluid minimum, which no client beats, is beside it.`,
      "Sequential calls find the worker idle: it sleeps on BullMQ's marker and wakes when the job is enqueued.",
    ],
  };
}
