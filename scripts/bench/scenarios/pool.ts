import { setTimeout as sleep } from 'node:timers/promises';
import { Producer } from '../../../producer/producer.ts';
import type { QueueNames } from '../../../shared/keys.ts';
import { openDeadLetterQueue, openQueue } from '../../../shared/queues.ts';
import type { RedisClient } from '../../../shared/redis.ts';
import type { MockAnthropicOptions, MockStats } from '../../../testing/mock-anthropic/index.ts';
import { meanWindowSum, utilization } from '../budget.ts';
import { type BenchMock, startBenchMock } from '../mock.ts';
import { startWorkers, type WorkerChild } from '../processes.ts';
import { withBenchScope } from '../redis-scope.ts';
import type { ScenarioContext, ScenarioResult } from '../report.ts';
import { roundingFor } from '../shapes.ts';
import { count, percent, seconds } from '../table.ts';
import { latencyFor, windowMsFor } from '../workload.ts';
import {
  type AloneHang,
  aloneHangPhase,
  boundFor,
  HANG_LIMIT,
  hangRows,
  hangTargets,
  type PoolHang,
  poolHangPhase,
} from './pool-hang.ts';
import {
  answeredSince,
  type BreakerChange,
  completedEvents,
  deploymentOf,
  type JobEnd,
  jobEnds,
  MEMBERS,
  POOL_ENV,
  type PoolMember,
  poolCalls,
  rateLimitedOf,
  runJobs,
  watchBreaker,
} from './pool-parts.ts';

const PROCESSES = 2;
const CONCURRENCY = 10;
const SHARE = 0.5;
/** A job's charge at the mock: 400 to 800 tokens (input + max_tokens), 600 on average. */
const MEAN_COST = 600;
/** Windows the throughput phase lasts at full rate. */
const WINDOWS = { full: 6, quick: 3, smoke: 2 } as const;
/** The deployment killed: after two windows of the failover phase, back three windows later. */
const KILLED = 'bedrock';
const KILL_AFTER = 2;
const DOWN = 3;
const TOTAL = MEMBERS.reduce((s, m) => s + m.limit, 0);

interface PoolRun {
  readonly redis: RedisClient;
  readonly names: QueueNames;
  readonly producer: Producer;
  readonly mocks: Map<string, BenchMock>;
  readonly windowMs: number;
}

/** Each member's and the pool's use of their limits, from the jobs' successful calls. */
function useOf(ends: readonly JobEnd[], windowMs: number, members = MEMBERS) {
  const admitted = (e: readonly JobEnd[]) =>
    e
      .filter((j) => Number.isFinite(j.admittedAt))
      .map((j) => ({ at: j.admittedAt, charge: j.charge }));
  const limit = members.reduce((s, m) => s + m.limit, 0);
  return {
    pool: utilization(admitted(ends), limit, windowMs).mean,
    each: new Map(
      members.map((m) => [
        m.name,
        utilization(admitted(ends.filter((j) => j.deployment === m.name)), m.limit, windowMs).mean,
      ]),
    ),
  };
}

interface Row {
  readonly phase: string;
  readonly deployment: string;
  readonly platform: string;
  readonly limit: number;
  readonly jobs: number;
  readonly tokens: number;
  readonly rateLimited: number;
  readonly use: number;
}

function rowsOf(phase: string, ends: JobEnd[], windowMs: number, r429: Map<string, number>): Row[] {
  const use = useOf(ends, windowMs);
  const row = (m: PoolMember | undefined): Row => {
    const mine = m ? ends.filter((e) => e.deployment === m.name) : ends;
    return {
      phase,
      deployment: m?.name ?? 'pool',
      platform: m?.kind ?? 'all three',
      limit: m?.limit ?? TOTAL,
      jobs: mine.length,
      tokens: mine.reduce((s, e) => s + e.charge, 0),
      rateLimited: m ? (r429.get(m.name) ?? 0) : [...r429.values()].reduce((a, b) => a + b, 0),
      use: m ? use.each.get(m.name)! : use.pool,
    };
  };
  return [...MEMBERS.map(row), row(undefined)];
}

async function statsOf(run: PoolRun): Promise<Map<string, MockStats>> {
  const out = new Map<string, MockStats>();
  for (const [name, mock] of run.mocks) out.set(name, await mock.stats());
  return out;
}

/** Phase one: the pool at full load, every deployment up. */
async function throughputPhase(run: PoolRun, n: number) {
  const t0 = Date.now();
  const { ids, done } = await runJobs(run, poolCalls(n, 0));
  const failed = await done;
  const wallMs = Date.now() - t0;
  const stats = await statsOf(run);
  const r429 = new Map([...stats].map(([name, s]) => [name, rateLimitedOf(s)]));
  const ends = await jobEnds(openQueue(run.redis, run.names), ids);
  return { rows: rowsOf('throughput', ends, run.windowMs, r429), failed, wallMs, stats };
}

/** Kills the KILLED mock after KILL_AFTER windows, starts it again on its port DOWN windows later. */
async function outage(run: PoolRun, options: MockAnthropicOptions) {
  await sleep(KILL_AFTER * run.windowMs);
  const mock = run.mocks.get(KILLED)!;
  const beforeKill = await mock.stats();
  const killedAt = Date.now();
  await mock.kill();
  await sleep(DOWN * run.windowMs - (Date.now() - killedAt));
  const port = Number(new URL(mock.url).port);
  run.mocks.set(KILLED, await startBenchMock({ ...options, port }));
  return { killedAt, backAt: Date.now(), beforeKill };
}

/** Phase two: one deployment killed mid-run and started again, the others carrying on. */
async function failoverPhase(run: PoolRun, n: number, killedOptions: MockAnthropicOptions) {
  const before = await statsOf(run);
  const watch = watchBreaker(run.redis, run.names, KILLED);
  const t0 = Date.now();
  const { ids, done } = await runJobs(run, poolCalls(n, 100_000));
  const down = await outage(run, killedOptions);
  const failed = await done;
  const wallMs = Date.now() - t0;
  const changes = await watch.stop();
  const after = await statsOf(run);
  const r429 = new Map(
    MEMBERS.map((m) => {
      const was = rateLimitedOf(before.get(m.name)!);
      const now = rateLimitedOf(after.get(m.name)!);
      return [m.name, m.name === KILLED ? rateLimitedOf(down.beforeKill) - was + now : now - was];
    }),
  );
  const ends = await jobEnds(openQueue(run.redis, run.names), ids);
  const events = await completedEvents(run.redis, run.names);
  const dead = await openDeadLetterQueue(run.redis, run.names).count();
  return {
    rows: rowsOf('failover', ends, run.windowMs, r429),
    ...failoverFigures(ends, changes, down, run.windowMs),
    jobs: n,
    completedOnce: ids.filter((id) => events.get(id) === 1).length,
    failed,
    dead,
    wallMs,
    answeredByOthers: MEMBERS.filter((m) => m.name !== KILLED).reduce(
      (s, m) => s + answeredSince(after.get(m.name)!, before.get(m.name)),
      0,
    ),
  };
}

/** What the outage did: how soon the breaker opened, the others' use, the move, the rejoin. */
function failoverFigures(
  ends: readonly JobEnd[],
  changes: readonly BreakerChange[],
  down: { killedAt: number; backAt: number },
  windowMs: number,
) {
  const { killedAt, backAt } = down;
  const opened = changes.find((c) => c.state === 'open' && c.at >= killedAt);
  const closed = changes.find((c) => c.state === 'closed' && c.at >= backAt);
  const others = MEMBERS.filter((m) => m.name !== KILLED);
  // The window sums averaged over the outage (its first window on): admissions come in bursts
  // a window apart, which fixed windows would cut into one more or one fewer.
  const during = ends.filter((e) => e.deployment !== KILLED);
  const span = { from: killedAt, to: backAt };
  const useOf = (m: PoolMember) =>
    meanWindowSum(
      during
        .filter((e) => e.deployment === m.name)
        .map((e) => ({ at: e.admittedAt, charge: e.charge })),
      span,
      windowMs,
    ) / m.limit;
  const triesOn = (e: JobEnd) => e.tries.filter((t) => t.deployment === KILLED);
  // When each call on it failed: its start, and the time it took.
  const failedAt = (e: JobEnd) => triesOn(e).map((t) => t.at + (t.latencyMs ?? 0));
  // Jobs whose call failed on it (in flight at the kill, sent before its breaker opened, its
  // trials), and how long after that each was admitted again (done on it later: not moved).
  const failed = ends.filter((e) => failedAt(e).length > 0);
  const moved = failed.filter((e) => e.deployment !== KILLED);
  const moveMs = failed.map((e) => e.admittedAt - Math.max(...failedAt(e)));
  const afterBack = ends.filter((e) => e.deployment === KILLED && e.admittedAt >= backAt);
  const rejoinAt = Math.min(...afterBack.map((e) => e.admittedAt));
  return {
    absorbMs: opened ? opened.at - killedAt : Number.NaN,
    othersUse:
      others.reduce((s, m) => s + useOf(m) * m.limit, 0) / others.reduce((s, m) => s + m.limit, 0),
    eachOther: others.map((m) => `${m.name} ${percent(useOf(m))}`).join(', '),
    callsWhileDown: ends.flatMap(triesOn).filter((t) => t.at >= killedAt && t.at < backAt).length,
    failedOnIt: failed.length,
    moved: moved.length,
    movedWithinMs: moveMs.length > 0 ? Math.max(...moveMs) : 0,
    downMs: backAt - killedAt,
    rejoinMs: afterBack.length > 0 ? rejoinAt - backAt : Number.NaN,
    closedMs: closed ? closed.at - backAt : Number.NaN,
    jobsAfterBack: afterBack.length,
    breaker: changes.map((c) => `${c.state} at ${seconds(c.at - killedAt)}`).join(', '),
  };
}

type Throughput = Awaited<ReturnType<typeof throughputPhase>>;
type Failover = Awaited<ReturnType<typeof failoverPhase>>;

const HEADERS = ['phase', 'deployment', 'platform', 'limit', 'jobs', 'tokens', '429s', 'use'];
const cells = (r: Row): string[] => [
  r.phase,
  r.deployment,
  r.platform,
  count(r.limit),
  count(r.jobs),
  count(r.tokens),
  count(r.rateLimited),
  percent(r.use),
];

/** The worker processes (the pool as `llmq worker` builds it), the producer, both phases. */
async function runPhases(
  ctx: ScenarioContext,
  run: Omit<PoolRun, 'producer'>,
  optionsOf: (m: PoolMember) => MockAnthropicOptions,
): Promise<{ a: Throughput; b: Failover }> {
  const deployments = MEMBERS.map((m) => deploymentOf(m, run.mocks.get(m.name)!.url));
  let workers: WorkerChild[] = [];
  const producer = new Producer({
    redis: run.redis,
    names: run.names,
    deployments: MEMBERS.map((m) => m.name),
  });
  try {
    workers = await startWorkers(PROCESSES, () => ({
      mode: 'llmq',
      redisUrl: ctx.redisUrl,
      names: run.names,
      deployments,
      env: POOL_ENV,
      concurrency: CONCURRENCY,
      maxInFlight: PROCESSES * CONCURRENCY,
      limiter: { windowMs: run.windowMs, limits: {}, outputAccounting: 'reserve' },
      // The worker's default cool-down, ÷ 10 with the windows under --quick.
      breaker: { cooldownMs: run.windowMs },
    }));
    for (const w of workers) w.go();
    const full = { ...run, producer };
    const windows = ctx.smoke ? WINDOWS.smoke : ctx.quick ? WINDOWS.quick : WINDOWS.full;
    ctx.log(`pool: throughput, ${windows} windows of ${count(TOTAL)} tokens`);
    const a = await throughputPhase(full, Math.ceil((windows * TOTAL) / MEAN_COST));
    const killed = MEMBERS.find((m) => m.name === KILLED)!;
    // Full rate before the kill and after the rejoin (two windows; --quick one), the others'
    // alone while it is down and until its trial call.
    const after = ctx.quick ? 1 : 2;
    const tokens = (KILL_AFTER + after) * TOTAL + (DOWN + 1) * (TOTAL - killed.limit);
    ctx.log(`pool: failover, ${KILLED} killed after ${KILL_AFTER} windows for ${DOWN}`);
    const b = await failoverPhase(full, Math.ceil(tokens / MEAN_COST), optionsOf(killed));
    await Promise.all(workers.map((w) => w.stop()));
    workers = [];
    return { a, b };
  } finally {
    for (const w of workers) w.kill();
    await producer.close().catch(() => {});
  }
}

/**
 * A pool of three deployments on three mock processes: the Claude API's path (limits from its
 * headers), Bedrock's and Vertex AI's (limits configured: they send none), 4,000, 8,000 and
 * 12,000 tokens per window, served by two worker processes built as `llmq worker` builds a
 * pool. First the pool at full load; then the Bedrock one killed mid-run and started again on
 * its port three windows later.
 */
export async function poolScenario(ctx: ScenarioContext): Promise<ScenarioResult> {
  const windowMs = windowMsFor(ctx.quick);
  const latency = latencyFor(ctx.quick);
  const optionsOf = (m: PoolMember): MockAnthropicOptions => ({
    ...ctx.counting,
    windowMs,
    limits: { tokens: m.limit },
    outputAccounting: 'reserve',
    latencyMs: latency.baseMs,
    latencyPerOutputTokenMs: latency.perTokenMs,
    outputShare: SHARE,
    roundReadings: roundingFor(m.limit),
  });
  const mocks = new Map<string, BenchMock>();
  try {
    const started = await Promise.allSettled(MEMBERS.map((m) => startBenchMock(optionsOf(m))));
    started.forEach((r, i) => {
      if (r.status === 'fulfilled') mocks.set(MEMBERS[i]!.name, r.value);
    });
    const failed = started.find((r) => r.status === 'rejected');
    if (failed) throw (failed as PromiseRejectedResult).reason;
    const { a, b } = await withBenchScope(ctx.redisUrl, 'pool', (redis, names) =>
      runPhases(ctx, { redis, names, mocks, windowMs }, optionsOf),
    );
    const hang = {
      ctx,
      windowMs,
      boundMs: boundFor(ctx.quick),
      options: optionsOf({ name: 'steady', kind: 'anthropic', limit: HANG_LIMIT }),
    };
    const silent = await poolHangPhase(hang);
    const alone = await aloneHangPhase(hang);
    return resultOf(a, b, { pool: silent, alone }, windowMs, optionsOf(MEMBERS[0]!));
  } finally {
    await Promise.all([...mocks.values()].map((m) => m.close()));
  }
}

function resultOf(
  a: Throughput,
  b: Failover,
  hang: { pool: PoolHang; alone: AloneHang },
  windowMs: number,
  mock: MockAnthropicOptions,
): ScenarioResult {
  const W = windowMs / 1000;
  const poolA = a.rows.at(-1)!;
  const poolB = b.rows.at(-1)!;
  const down = `${KILLED} killed after ${KILL_AFTER * W} s, back ${DOWN * W} s later`;
  return {
    name: 'pool',
    title: `three deployments (Claude API, Bedrock, Vertex AI paths) of ${MEMBERS.map((m) => count(m.limit)).join(' / ')} tokens per ${W} s, ${PROCESSES} worker processes × ${CONCURRENCY}; then ${down}; then a silent provider (accepts, never answers), one of two equal deployments of ${count(HANG_LIMIT)}, and alone`,
    settings: { mock, members: MEMBERS, processes: PROCESSES, concurrency: CONCURRENCY, windowMs },
    headers: HEADERS,
    rows: [...[...a.rows, ...b.rows].map(cells), ...hangRows(hang.pool, hang.alone)],
    figures: [{ throughput: a }, { failover: b }, { hang: hang.pool }, { hangAlone: hang.alone }],
    targets: [
      {
        name: 'throughput ≥ 0.95× the sum of the limits, 0 429s',
        met: poolA.use >= 0.95 && poolA.rateLimited === 0 && a.failed === 0,
        detail: `${percent(poolA.use)} of ${count(TOTAL)} per ${W} s (${count(poolA.tokens)} tokens, ${count(poolA.jobs)} jobs in ${seconds(a.wallMs)}), ${poolA.rateLimited} 429s, ${a.failed} failed`,
      },
      {
        name: `${down}: every job completes once, none dead`,
        met: b.completedOnce === b.jobs && b.dead === 0 && b.failed === 0,
        detail: `${b.completedOnce}/${b.jobs} completed once, ${b.dead} dead, ${poolB.rateLimited} 429s (down ${seconds(b.downMs)} as measured: killed, then listening again)`,
      },
      {
        // Its work done by the others: each job failed on it admitted elsewhere within a
        // second of its failure, and the others at their limits while it is down.
        name: 'the others absorb its share within a second',
        met: b.moved === b.failedOnIt && b.movedWithinMs <= 1_000 && b.othersUse >= 0.95,
        detail: `${b.failedOnIt} jobs failed on it, ${b.moved} admitted elsewhere${b.failedOnIt > 0 ? `, each within ${seconds(b.movedWithinMs)} of its failure` : ''}; the others at ${percent(b.othersUse)} of their limits its window sums averaged while it was down (${b.eachOther}); its breaker open ${seconds(b.absorbMs)} after the kill (${b.callsWhileDown} calls to it while down, trials included)`,
      },
      {
        name: 'it rejoins after its trial call',
        met: Number.isFinite(b.rejoinMs) && Number.isFinite(b.closedMs) && b.jobsAfterBack > 0,
        detail: `first call answered ${seconds(b.rejoinMs)} after it was back, breaker closed at ${seconds(b.closedMs)}; ${b.jobsAfterBack} jobs on it after; breaker: ${b.breaker}`,
      },
      ...hangTargets(hang.pool, hang.alone, windowMs),
    ],
    notes: [
      `jobs of 400 to 800 tokens (input + max_tokens, fixed seed), answers half of max_tokens, reserve accounting; use: tokens admitted per full window over the limit, from the first admission (the pool's row against the sum)`,
      `the Claude API deployment's limits come from the mock's headers; Bedrock's and Vertex AI's are configured (tpm), as those platforms send no rate headers; breakers cool down for one window (the default 10 s, ÷ 10 under --quick)`,
      `failover: ${KILLED}'s mock SIGKILLed and started again on its port; its 429s before the kill from the last stats read before it; the others answered ${count(b.answeredByOthers)} calls`,
      `hang: the silent mock (fault hang: reads each request, never answers) and a steady one, equal preference, limits from the steady one's headers; the workers' default first-byte bound (20 s, ÷ 10 under --quick) and slot share (half); hang alone: the queue's one mock silent for 2.5 bounds, then healed; use: the steady deployment's full windows`,
    ],
  };
}
