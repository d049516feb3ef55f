import { setTimeout as sleep } from 'node:timers/promises';
import { Producer } from '../../../producer/producer.ts';
import type { QueueNames } from '../../../shared/keys.ts';
import { openQueue } from '../../../shared/queues.ts';
import type { RedisClient } from '../../../shared/redis.ts';
import type { CommandCounts } from '../command-counter.ts';
import { withMock } from '../mock.ts';
import { WorkerChild } from '../processes.ts';
import { redisCpuSeconds } from '../redis-info.ts';
import { withBenchScope } from '../redis-scope.ts';
import type { ScenarioContext, ScenarioResult } from '../report.ts';
import { count, megabytes, percent, seconds } from '../table.ts';
import type { WorkerProcessConfig, WorkerProcessReport } from '../worker-protocol.ts';
import { shortCall } from '../workload.ts';

const CONCURRENCY = 10;

/** Enqueues `jobs` requests with the producer (the same job data in every setup). */
async function fill(redis: RedisClient, names: QueueNames, jobs: number): Promise<void> {
  const producer = new Producer({ redis, names });
  try {
    const requests = Array.from({ length: jobs }, (_, i) => shortCall(i, 16));
    for (let i = 0; i < jobs; i += 5_000) await producer.enqueueMany(requests.slice(i, i + 5_000));
  } finally {
    await producer.close();
  }
}

/** Polls until `jobs` jobs are completed or failed; resolves with the time it took from `t0`. */
export async function drained(
  redis: RedisClient,
  names: QueueNames,
  jobs: number,
  t0: number,
  timeoutMs: number,
): Promise<number> {
  const queue = openQueue(redis, names);
  queue.on('error', () => {});
  try {
    for (;;) {
      const c = await queue.getJobCounts('completed', 'failed');
      if ((c['completed'] ?? 0) + (c['failed'] ?? 0) >= jobs) return performance.now() - t0;
      if (performance.now() - t0 > timeoutMs)
        throw new Error(`only ${c['completed']} of ${jobs} jobs done after ${timeoutMs} ms`);
      await sleep(25);
    }
  } finally {
    await queue.close();
  }
}

interface Setup {
  readonly label: string;
  readonly mode: WorkerProcessConfig['mode'];
  readonly providerDelayMs?: number;
}

export interface OverheadRow {
  readonly setup: string;
  readonly jobs: number;
  readonly wallMs: number;
  readonly jobsPerSecond: number;
  readonly peakRssBytes: number;
  /** RSS of the same process connected and idle, before any job. */
  readonly idleRssBytes: number;
  readonly peakHeapBytes: number;
  readonly cpuMsPerJob: number;
  /** CPU the Redis server used while the jobs were drained, a job (everything it ran then). */
  readonly redisCpuMsPerJob: number;
  readonly redisPerJob: number;
  readonly roundTripsPerJob: number;
  readonly commandsPerJob: Readonly<Record<string, number>>;
  readonly compiled: boolean;
  /** jobs/s of every run of this setup, in order (the row is the median run). */
  readonly runsJobsPerSecond?: readonly number[];
}

/** One run of one setup: `jobs` enqueued, then drained by a worker process of that setup. */
function runSetup(
  ctx: ScenarioContext,
  s: Setup,
  jobs: number,
  mockUrl: string,
): Promise<OverheadRow> {
  return withBenchScope(ctx.redisUrl, 'overhead', async (redis, names) => {
    await fill(redis, names, jobs);
    const child = await WorkerChild.start({
      mode: s.mode,
      redisUrl: ctx.redisUrl,
      names,
      mockUrl,
      concurrency: CONCURRENCY,
      limiter: { windowMs: 60_000, limits: {} },
      maxInFlight: CONCURRENCY,
      countCommands: true,
      providerDelayMs: s.providerDelayMs ?? 0,
    });
    let report: WorkerProcessReport;
    let wallMs: number;
    let redisCpuS: number;
    try {
      const cpu0 = await redisCpuSeconds(redis);
      const t0 = performance.now();
      child.go();
      wallMs = await drained(redis, names, jobs, t0, 600_000);
      redisCpuS = (await redisCpuSeconds(redis)) - cpu0;
      report = await child.stop();
    } finally {
      child.kill();
    }
    const r: CommandCounts = report.redis ?? { commands: {}, roundTrips: Number.NaN };
    const total = Object.values(r.commands).reduce((a, b) => a + b, 0);
    const perJob = Object.fromEntries(
      Object.entries(r.commands)
        .sort(([, a], [, b]) => b - a)
        .map(([k, v]) => [k, Math.round((v / jobs) * 100) / 100]),
    );
    return {
      setup: s.label,
      jobs,
      wallMs,
      jobsPerSecond: jobs / (wallMs / 1000),
      peakRssBytes: report.peakRssBytes,
      idleRssBytes: report.idleRssBytes,
      peakHeapBytes: report.peakHeapBytes,
      cpuMsPerJob: report.cpuMs / jobs,
      redisCpuMsPerJob: (redisCpuS * 1000) / jobs,
      redisPerJob: total / jobs,
      roundTripsPerJob: r.roundTrips / jobs,
      commandsPerJob: perJob,
      compiled: report.compiled,
    };
  });
}

const ms = (x: number) => `${x.toFixed(1)} ms`;

/**
 * Jobs' pickups: each from its enqueue (BullMQ's `timestamp`) to its move to active
 * (`processedOn`, which for llmq is after the gate's admission, just before the call starts), one
 * job at a time into an idle worker with free budget, ms.
 */
export function pickupLatency(ctx: ScenarioContext, s: Setup, jobs: number): Promise<number[]> {
  ctx.log(`overhead: pickup latency, ${s.label}`);
  return withBenchScope(ctx.redisUrl, 'pickup', async (redis, names) => {
    const child = await WorkerChild.start({
      mode: s.mode,
      redisUrl: ctx.redisUrl,
      names,
      concurrency: CONCURRENCY,
      limiter: { windowMs: 60_000, limits: {} },
      maxInFlight: CONCURRENCY,
      providerDelayMs: s.providerDelayMs ?? 0,
    });
    const producer = new Producer({ redis, names });
    const queue = openQueue(redis, names);
    queue.on('error', () => {});
    const waits: number[] = [];
    try {
      child.go();
      // Let the worker settle into idling on an empty queue (the case measured).
      await sleep(ctx.quick ? 300 : 1_000);
      for (let i = 0; i < jobs; i++) {
        const id = await producer.enqueue(shortCall(i, 16));
        const t0 = performance.now();
        for (;;) {
          const job = await queue.getJob(id);
          if (job?.finishedOn) {
            waits.push((job.processedOn ?? Number.NaN) - job.timestamp);
            break;
          }
          if (performance.now() - t0 > 30_000) throw new Error(`job ${id} not done in 30 s`);
          await sleep(5);
        }
        // Idle again between jobs, at random, as jobs arrive in a quiet queue.
        await sleep(20 + Math.random() * (ctx.quick ? 80 : 280));
      }
      await child.stop();
    } finally {
      child.kill();
      await producer.close();
      await queue.close();
    }
    return waits;
  });
}

/** p50 and p99 of pickups, ms. */
function quantiles(waits: readonly number[]): { p50: number; p99: number } {
  const sorted = [...waits].sort((a, b) => a - b);
  const q = (p: number) => sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)]!;
  return { p50: q(0.5), p99: q(0.99) };
}

/**
 * Pickups of bare BullMQ and of llmq, taking turns (a slow spell of a shared machine falls on
 * both), `rounds` of `jobs` each: each side's p50 and p99 over all of its pickups, and every
 * round's p99.
 */
async function pickups(
  ctx: ScenarioContext,
  bare: Setup,
  llmq: Setup,
  jobs: number,
  rounds: number,
) {
  const waits = { bare: [] as number[], llmq: [] as number[] };
  const p99s = { bare: [] as number[], llmq: [] as number[] };
  for (let i = 0; i < rounds; i++) {
    for (const [side, s] of [
      ['bare', bare],
      ['llmq', llmq],
    ] as const) {
      const w = await pickupLatency(ctx, s, jobs);
      waits[side].push(...w);
      p99s[side].push(quantiles(w).p99);
    }
  }
  return {
    jobs: jobs * rounds,
    bare: { ...quantiles(waits.bare), rounds: p99s.bare },
    llmq: { ...quantiles(waits.llmq), rounds: p99s.llmq },
  };
}

/**
 * The gate's cost: the same jobs drained by one worker process at the same concurrency. First
 * without the network: a bare BullMQ worker with a no-op processor against llmq's worker (gate,
 * stamping, settling) with an unlimited budget and a zero-latency in-process provider. Then with
 * the real call: a bare BullMQ worker making llmq's streamed SDK call to the mock (no latency)
 * against llmq's worker making it. Each process counts its own Redis commands.
 */
export async function overheadScenario(ctx: ScenarioContext): Promise<ScenarioResult> {
  const jobs = ctx.quick ? 300 : 5_000;
  const setups: Setup[] = [
    { label: 'bare BullMQ, 1 ms processor', mode: 'bare', providerDelayMs: 1 },
    { label: 'llmq, 1 ms in-process provider', mode: 'llmq-instant', providerDelayMs: 1 },
    { label: 'bare BullMQ + one trivial Lua script per job', mode: 'bare-script' },
    { label: 'bare BullMQ + the SDK call to the mock', mode: 'bare-call' },
    { label: 'llmq + the SDK call to the mock', mode: 'llmq' },
  ];
  // Every setup runs `repeats` times, the setups taking turns, so that a slow spell of a shared
  // machine falls on both sides of a comparison; each row is the run with the median rate.
  const repeats = ctx.quick ? 1 : 3;
  const runs: OverheadRow[][] = setups.map(() => []);
  // p99 of whole-ms pickups is a tail: 1,200 a side make it the 12th largest, not the 6th.
  const pickup = await pickups(
    ctx,
    setups[0]!,
    setups[1]!,
    ctx.quick ? 20 : 300,
    ctx.quick ? 1 : 4,
  );
  await withMock({ latencyMs: 0, latencyPerOutputTokenMs: 0, outputShare: 0.5 }, async (mock) => {
    for (let round = 1; round <= repeats; round++) {
      for (const [i, s] of setups.entries()) {
        ctx.log(`overhead: ${s.label}${repeats > 1 ? ` (run ${round} of ${repeats})` : ''}`);
        runs[i]!.push(await runSetup(ctx, s, jobs, mock.url));
      }
    }
  });
  const rows: OverheadRow[] = runs.map((r) => {
    const sorted = [...r].sort((a, b) => a.jobsPerSecond - b.jobsPerSecond);
    const median = sorted[Math.floor((sorted.length - 1) / 2)] as OverheadRow;
    return { ...median, runsJobsPerSecond: r.map((x) => x.jobsPerSecond) };
  });
  const [bare, instant, oneScript, call, llmq] = rows as [
    OverheadRow,
    OverheadRow,
    OverheadRow,
    OverheadRow,
    OverheadRow,
  ];
  // Each llmq row against the bare BullMQ row of the same kind of call.
  // Run by run: each llmq run against the bare run just before it.
  const pairs = (l: number, b: number) =>
    runs[l]!.map((x, i) => percent(x.jobsPerSecond / runs[b]![i]!.jobsPerSecond, 0)).join(', ');
  const vsBare = (r: OverheadRow) =>
    r.jobsPerSecond / (r === llmq || r === call ? call : bare).jobsPerSecond;
  return {
    name: 'overhead',
    title: `${count(jobs)} jobs through one worker process at concurrency ${CONCURRENCY}`,
    settings: { jobs, concurrency: CONCURRENCY, mock: { latencyMs: 0 } },
    headers: [
      'setup',
      'jobs',
      'wall',
      'jobs/s',
      'each run',
      'vs bare BullMQ',
      'peak RSS',
      'idle RSS',
      'peak heap',
      'CPU ms/job',
      'Redis CPU ms/job',
      'Redis cmds/job',
      'round trips/job',
    ],
    rows: rows.map((r) => [
      r.setup,
      count(r.jobs),
      seconds(r.wallMs),
      count(r.jobsPerSecond),
      (r.runsJobsPerSecond ?? []).map((x) => count(x)).join(' '),
      percent(vsBare(r), 0),
      megabytes(r.peakRssBytes),
      megabytes(r.idleRssBytes),
      megabytes(r.peakHeapBytes),
      r.cpuMsPerJob.toFixed(2),
      r.redisCpuMsPerJob.toFixed(2),
      r.redisPerJob.toFixed(1),
      r.roundTripsPerJob.toFixed(1),
    ]),
    figures: [...rows, { pickup }],
    targets: [
      {
        name: "the gate's latency at free budget: p99 from a job's enqueue to its call's start at most 2 ms above bare BullMQ's pickup",
        met: pickup.llmq.p99 - pickup.bare.p99 <= 2,
        detail: `llmq p50 ${ms(pickup.llmq.p50)}, p99 ${ms(pickup.llmq.p99)}; bare BullMQ p50 ${ms(pickup.bare.p50)}, p99 ${ms(pickup.bare.p99)} (${count(pickup.jobs)} jobs each, one at a time into an idle worker, in rounds taking turns; each round's p99: llmq ${pickup.llmq.rounds.join(', ')}, bare ${pickup.bare.rounds.join(', ')} ms)`,
      },
    ],
    notes: [
      `throughput with a 1 ms provider: llmq ${count(instant.jobsPerSecond)} against bare BullMQ's ${count(bare.jobsPerSecond)} jobs/s (${percent(vsBare(instant), 0)}); with the SDK call to the mock on both sides: ${count(llmq.jobsPerSecond)} against ${count(call.jobsPerSecond)} (${percent(vsBare(llmq), 0)})`,
      `Redis CPU per admitted job: llmq ${instant.redisCpuMsPerJob.toFixed(3)} ms against bare BullMQ's ${bare.redisCpuMsPerJob.toFixed(3)} ms (1 ms provider)`,
      `each setup ran ${repeats} time${repeats === 1 ? '' : 's'}, the setups taking turns; a row is its median run ('each run': jobs/s of every run, in order)`,
      `'vs bare BullMQ': each llmq row's median against the bare row's of the same kind (no-op, or the same SDK call)${repeats > 1 ? `; run by run, the zero-latency provider kept ${pairs(1, 0)} and the SDK call ${pairs(4, 3)}` : ''}`,
      `CPU a job, at zero latency: the worker process ${instant.cpuMsPerJob.toFixed(2)} ms against bare BullMQ's ${bare.cpuMsPerJob.toFixed(2)} (${(instant.cpuMsPerJob / bare.cpuMsPerJob).toFixed(1)}×), the Redis server ${instant.redisCpuMsPerJob.toFixed(2)} ms against ${bare.redisCpuMsPerJob.toFixed(2)} (${(instant.redisCpuMsPerJob / bare.redisCpuMsPerJob).toFixed(1)}×); Redis's from INFO, over the drain, so it includes the bench's own polling`,
      `what one more Redis command a job costs on this machine: bare BullMQ with one trivial script per job (an INCR, on a connection of its own) keeps ${percent(vsBare(oneScript), 0)} of the no-op's rate`,
      `llmq's Redis commands per job: ${Object.entries(instant.commandsPerJob)
        .filter(([, v]) => v >= 0.05)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')}`,
      `bare BullMQ's: ${Object.entries(bare.commandsPerJob)
        .filter(([, v]) => v >= 0.05)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')}`,
      `the mock runs in a process of its own with no latency; so does each worker, running ${llmq.compiled ? 'compiled JavaScript (dist/)' : 'TypeScript through tsx'} with Node's defaults (peak RSS and heap sampled every 100 ms while it works; idle RSS: the same process connected, before its first job)`,
    ],
  };
}
