/**
 * The pool scenario's silent-provider phases (issue 49): a provider that accepts calls and never
 * answers (the mock's `hang` fault), in a pool of two equal deployments and alone.
 *
 * - `hang`: one of two deployments of equal preference is silent from the start. Its calls are
 *   aborted at the first byte's bound and their jobs move to the other; until its breaker opens
 *   it holds at most its share of the slots, so the other keeps working near its limit.
 * - `hang alone`: the queue's one provider goes silent for 2.5 first-byte bounds, then answers
 *   again; its jobs are retried by time (no attempt spent) and complete once it does, and no
 *   call holds its slot past the bound.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Producer } from '../../../producer/producer.ts';
import type { DeploymentConfig } from '../../../shared/deployments.ts';
import type { AttemptRecord } from '../../../shared/job.ts';
import type { QueueNames } from '../../../shared/keys.ts';
import { openDeadLetterQueue, openQueue } from '../../../shared/queues.ts';
import type { RedisClient } from '../../../shared/redis.ts';
import { DEFAULT_FIRST_BYTE_MS } from '../../../shared/response-timeouts.ts';
import type { MockAnthropicOptions } from '../../../testing/mock-anthropic/index.ts';
import { meanWindowSum, utilization } from '../budget.ts';
import { startBenchMock } from '../mock.ts';
import { startWorkers, type WorkerChild } from '../processes.ts';
import { withBenchScope } from '../redis-scope.ts';
import type { ScenarioContext } from '../report.ts';
import { count, percent, seconds } from '../table.ts';
import type { WorkerProcessConfig } from '../worker-protocol.ts';
import {
  type BreakerChange,
  completedEvents,
  jobEnds,
  POOL_ENV,
  poolCalls,
  rateLimitedOf,
  runJobs,
  watchBreaker,
} from './pool-parts.ts';

const PROCESSES = 2;
const CONCURRENCY = 10;
/**
 * Tokens per window of each deployment (and of the provider alone): the jobs the silent one does
 * not take (20 of 30, some 12,000 tokens) are more than the steady one admits in the two windows
 * until the silent one's calls fail at the bound, so it has work to be at its limit meanwhile.
 */
export const HANG_LIMIT = 5_000;
const LIMIT = HANG_LIMIT;
/** Jobs of the pool's phase (the issue's 30), and of the phase alone. */
const JOBS = { pool: 30, alone: 20, smoke: 10 } as const;
/** The silent provider alone is silent this many first-byte bounds. */
const SILENT_BOUNDS = 2.5;

/** What a phase measured of its jobs. */
export interface HangFigures {
  readonly jobs: number;
  readonly completedOnce: number;
  readonly dead: number;
  readonly failed: number;
  /** The longest from a job's enqueue to its completion, ms. */
  readonly longestMs: number;
  /** The first byte's bound the workers ran with, ms. */
  readonly boundMs: number;
  /** Failed calls (tries aborted at the bound), and the longest one held its slot, ms. */
  readonly silentTries: number;
  readonly longestTryMs: number;
  /** Tries that spent one of the job's attempts. */
  readonly attemptsSpent: number;
  /** Each deployment's jobs, tokens, 429s and use of its limit. */
  readonly rows: readonly HangRow[];
}

export interface HangRow {
  readonly deployment: string;
  readonly jobs: number;
  readonly tokens: number;
  readonly rateLimited: number;
  readonly use: number;
}

export interface Phase {
  readonly ctx: ScenarioContext;
  readonly windowMs: number;
  readonly boundMs: number;
  readonly options: MockAnthropicOptions;
}

/** The first byte's bound: the worker's default, ÷ 10 under --quick as windows are. */
export const boundFor = (quick: boolean): number =>
  quick ? DEFAULT_FIRST_BYTE_MS / 10 : DEFAULT_FIRST_BYTE_MS;

/** An anthropic deployment on a mock, its limits read from the mock's headers. */
const onMock = (name: string, url: string): DeploymentConfig => ({
  name,
  kind: 'anthropic',
  baseUrl: url,
  credentials: { apiKeyEnv: 'BENCH_POOL_KEY' },
  preference: 1,
});

function workerConfig(
  ph: Phase,
  names: QueueNames,
  target: Pick<WorkerProcessConfig, 'deployments' | 'mockUrl'>,
): WorkerProcessConfig {
  return {
    mode: 'llmq',
    redisUrl: ph.ctx.redisUrl,
    names,
    ...target,
    env: POOL_ENV,
    concurrency: CONCURRENCY,
    maxInFlight: PROCESSES * CONCURRENCY,
    limiter: { windowMs: ph.windowMs, limits: {}, outputAccounting: 'reserve' },
    breaker: { cooldownMs: ph.windowMs },
    ...(ph.ctx.quick ? { firstByteTimeoutMs: ph.boundMs } : {}),
  };
}

/** Runs `n` jobs through worker processes built by `config`; what became of them. */
async function runPhase(
  ph: Phase,
  label: string,
  n: number,
  config: (names: QueueNames) => WorkerProcessConfig,
  during: (redis: RedisClient, names: QueueNames) => Promise<unknown> = async () => {},
) {
  return withBenchScope(ph.ctx.redisUrl, label, async (redis, names) => {
    let workers: WorkerChild[] = [];
    const producer = new Producer({ redis, names });
    try {
      workers = await startWorkers(PROCESSES, () => config(names));
      for (const w of workers) w.go();
      const { ids, done } = await runJobs({ producer }, poolCalls(n, 200_000));
      const [failed] = await Promise.all([done, during(redis, names)]);
      await Promise.all(workers.map((w) => w.stop()));
      workers = [];
      const queue = openQueue(redis, names);
      const ends = await jobEnds(queue, ids);
      const enqueued = await Promise.all(
        ids.map(async (id) => (await queue.getJob(id))?.timestamp),
      );
      const results = await Promise.all(
        ids.map(async (id) => (await queue.getJob(id))?.returnvalue),
      );
      const events = await completedEvents(redis, names);
      return {
        ends,
        failed,
        dead: await openDeadLetterQueue(redis, names).count(),
        completedOnce: ids.filter((id) => events.get(id) === 1).length,
        longestMs: Math.max(
          ...results.map((r, i) => (r?.completedAt ?? Number.NaN) - (enqueued[i] ?? Number.NaN)),
        ),
        attemptsSpent: results.reduce((s, r) => s + Math.max(0, (r?.attempts ?? 1) - 1), 0),
      };
    } finally {
      for (const w of workers) w.kill();
      await producer.close().catch(() => {});
    }
  });
}

/** The tries that failed, and the longest a failed one held its slot. */
function triesOf(ends: readonly { tries: readonly AttemptRecord[] }[]) {
  const tries = ends.flatMap((e) => e.tries).filter((t) => t.outcome !== 'ok');
  return {
    silentTries: tries.length,
    longestTryMs: Math.max(0, ...tries.map((t) => t.latencyMs ?? 0)),
  };
}

/** A phase's figures from what became of its `n` jobs. */
function figuresOf(
  ph: Phase,
  n: number,
  run: Awaited<ReturnType<typeof runPhase>>,
  rows: readonly HangRow[],
): HangFigures {
  const { completedOnce, dead, failed, longestMs, attemptsSpent } = run;
  const tries = triesOf(run.ends);
  return {
    jobs: n,
    completedOnce,
    dead,
    failed,
    longestMs,
    boundMs: ph.boundMs,
    ...tries,
    attemptsSpent,
    rows,
  };
}

/** A deployment's row: its jobs, their tokens, its 429s and its use of its limit. */
function rowOf(
  deployment: string,
  ends: Awaited<ReturnType<typeof runPhase>>['ends'],
  rateLimited: number,
  windowMs: number,
  limit = LIMIT,
): HangRow {
  const mine = ends.filter((e) => (e.deployment ?? 'default') === deployment);
  const admitted = mine.map((e) => ({ at: e.admittedAt, charge: e.charge }));
  return {
    deployment,
    jobs: mine.length,
    tokens: mine.reduce((s, e) => s + e.charge, 0),
    rateLimited,
    use: mine.length > 0 ? utilization(admitted, limit, windowMs).mean : 0,
  };
}

/** Two deployments of equal preference, one silent from the start. */
export async function poolHangPhase(ph: Phase) {
  const n = ph.ctx.smoke ? JOBS.smoke : JOBS.pool;
  const [steady, silent] = await Promise.all([
    startBenchMock(ph.options),
    startBenchMock({ ...ph.options, faults: { hang: 1 } }),
  ]);
  let changes: BreakerChange[] = [];
  try {
    const deployments = [onMock('steady', steady.url), onMock('silent', silent.url)];
    ph.ctx.log(`pool: hang, ${n} jobs, deployment silent never answers`);
    const run = await runPhase(
      ph,
      'pool-hang',
      n,
      (names) => workerConfig(ph, names, { deployments }),
      async (redis, names) => {
        const watch = watchBreaker(redis, names, 'silent');
        // Its first calls fail at the bound: its breaker opens then.
        await sleep(ph.boundMs * 2);
        changes = await watch.stop();
      },
    );
    const firstAt = Math.min(...run.ends.map((e) => e.admittedAt));
    const openedAt = changes.find((c) => c.state === 'open')?.at;
    const figures = figuresOf(ph, n, run, [
      rowOf('steady', run.ends, rateLimitedOf(await steady.stats()), ph.windowMs),
      rowOf('silent', run.ends, 0, ph.windowMs),
    ]);
    // The steady one's window sums while the silent one held its share, until its breaker opened.
    const steadyAdmissions = run.ends
      .filter((e) => e.deployment === 'steady')
      .map((e) => ({ at: e.admittedAt, charge: e.charge }));
    const meanwhile =
      openedAt === undefined
        ? Number.NaN
        : meanWindowSum(steadyAdmissions, { from: firstAt, to: openedAt }, ph.windowMs) / LIMIT;
    return {
      ...figures,
      breakerOpenedMs: openedAt === undefined ? undefined : openedAt - firstAt,
      steadyMeanwhile: meanwhile,
      silentCalls: (await silent.stats()).attempts,
    };
  } finally {
    await Promise.all([steady.close(), silent.close()]);
  }
}

/** The queue's one provider silent for a while, then answering again. */
export async function aloneHangPhase(ph: Phase) {
  const n = ph.ctx.smoke ? JOBS.smoke : JOBS.alone;
  const mock = await startBenchMock(ph.options);
  const silentMs = SILENT_BOUNDS * ph.boundMs;
  let answersAgainAt = 0;
  try {
    ph.ctx.log(`pool: hang alone, ${n} jobs, the provider silent for ${seconds(silentMs)}`);
    await mock.setFaults({ hang: 1 });
    const startedAt = Date.now();
    const run = await runPhase(
      ph,
      'pool-hang-alone',
      n,
      (names) => workerConfig(ph, names, { mockUrl: mock.url }),
      async () => {
        await sleep(silentMs);
        await mock.setFaults({});
        answersAgainAt = Date.now();
      },
    );
    const lastDone = Math.max(...run.ends.map((e) => e.admittedAt));
    const figures = figuresOf(ph, n, run, [
      rowOf('default', run.ends, rateLimitedOf(await mock.stats()), ph.windowMs),
    ]);
    return {
      ...figures,
      silentMs,
      answeredAgainAfterMs: answersAgainAt - startedAt,
      lastStartAfterMs: lastDone - answersAgainAt,
    };
  } finally {
    await mock.close();
  }
}

export type PoolHang = Awaited<ReturnType<typeof poolHangPhase>>;
export type AloneHang = Awaited<ReturnType<typeof aloneHangPhase>>;

/** The phases' rows, in the pool scenario's columns. */
export function hangRows(pool: PoolHang, alone: AloneHang): string[][] {
  const row = (phase: string, platform: string, r: HangRow) => [
    phase,
    r.deployment,
    platform,
    count(LIMIT),
    count(r.jobs),
    count(r.tokens),
    count(r.rateLimited),
    percent(r.use),
  ];
  return [
    ...pool.rows.map((r) => row('hang', 'Claude API path', r)),
    ...alone.rows.map((r) => row('hang alone', 'Claude API path', r)),
  ];
}

/** The issue's targets for the silent provider, met or missed. */
export function hangTargets(pool: PoolHang, alone: AloneHang, windowMs: number) {
  const within = 3 * pool.boundMs;
  const steady = pool.rows.find((r) => r.deployment === 'steady')!;
  const slack = 1_000;
  return [
    {
      name: `one of two equal deployments silent: ${pool.jobs} jobs all completed within ${seconds(within, 0)} of their enqueue, none dead`,
      met:
        pool.completedOnce === pool.jobs &&
        pool.dead === 0 &&
        pool.failed === 0 &&
        pool.longestMs <= within,
      detail: `${pool.completedOnce}/${pool.jobs} completed once, ${pool.dead} dead; the longest ${seconds(pool.longestMs)} from enqueue to result (first byte's bound ${seconds(pool.boundMs, 0)}); ${pool.silentCalls} calls to the silent one, each aborted at the bound and its job moved (${pool.attemptsSpent} attempts spent)`,
    },
    {
      name: 'its breaker open, the live one near its limit meanwhile',
      met: pool.breakerOpenedMs !== undefined && pool.steadyMeanwhile >= 0.9,
      detail: `breaker open ${pool.breakerOpenedMs === undefined ? 'never' : `${seconds(pool.breakerOpenedMs)} after the first admission`}; until then the steady one at ${percent(pool.steadyMeanwhile)} of its ${count(LIMIT)} per ${seconds(windowMs, 0)} (its window sums averaged), ${percent(steady.use)} over its full windows; ${steady.jobs} jobs, ${steady.rateLimited} 429s`,
    },
    {
      name: 'alone, a silent provider: every job retried by time and completed once it answers again; no slot held past the bound',
      met:
        alone.completedOnce === alone.jobs &&
        alone.dead === 0 &&
        alone.failed === 0 &&
        alone.attemptsSpent === 0 &&
        alone.silentTries > 0 &&
        alone.longestTryMs <= alone.boundMs + slack,
      detail: `silent for ${seconds(alone.silentMs)}: ${alone.completedOnce}/${alone.jobs} completed once, ${alone.dead} dead, ${alone.attemptsSpent} attempts spent over ${alone.silentTries} aborted tries, the longest held its slot ${seconds(alone.longestTryMs)} (bound ${seconds(alone.boundMs, 0)}); the last call began ${seconds(alone.lastStartAfterMs)} after it answered again`,
    },
  ];
}
