import { type DashboardHandle, startDashboard } from '../../../dashboard/server.ts';
import { Producer } from '../../../producer/producer.ts';
import type { QueueNames } from '../../../shared/keys.ts';
import { limiterKeys } from '../../../shared/limiter/limiter-keys.ts';
import { startPrivateRedis } from '../../../shared/private-redis.ts';
import type { RedisClient } from '../../../shared/redis.ts';
import { scriptNames, scriptTextKey } from '../command-counter.ts';
import { withMock } from '../mock.ts';
import { startWorkers, type WorkerChild } from '../processes.ts';
import { redisCpuSeconds } from '../redis-info.ts';
import { benchRedis, withBenchScope } from '../redis-scope.ts';
import type { ScenarioContext, ScenarioResult, Target } from '../report.ts';
import { count, millis } from '../table.ts';
import type { WorkerProcessReport } from '../worker-protocol.ts';
import { shortCall } from '../workload.ts';
import { drained } from './overhead.ts';

const CONCURRENCY = 50;
/** Worker processes a setup runs: the target compares 4 with 2 (this machine has 2 cores). */
const WORKERS = [1, 2, 4];
/**
 * Calls slower than this (µs) are kept by SLOWLOG: the longest script call is read from it.
 * `LLMQ_BENCH_SLOWLOG_US=0` keeps every call: the figures then show where Redis's time goes.
 */
const SLOWLOG_US = Number(process.env['LLMQ_BENCH_SLOWLOG_US'] ?? 200);

interface Setup {
  /** 0: no tenant at all. */
  readonly tenants: number;
  readonly fair: boolean;
  readonly workers: number;
  readonly mode: 'llmq' | 'bare-call';
}

interface Drain extends Setup {
  readonly jobs: number;
  readonly jobsPerSecond: number;
  readonly redisCpuMsPerJob: number;
  /** The longest single command during the drain (ms) and its name; 0 when none passed SLOWLOG_US. */
  readonly longestMs: number;
  readonly longestCommand: string;
  /** The longest call of each of the five slowest command names (ms), the slowest first. */
  readonly longestByCommand: Readonly<Record<string, number>>;
  /**
   * µs a job SLOWLOG kept, by name, the ten largest (every call with LLMQ_BENCH_SLOWLOG_US=0,
   * but for commands run in a MULTI: an acquire with its fetches, a completion's scripts).
   */
  readonly usPerJobByCommand: Readonly<Record<string, number>>;
  readonly admitted: number;
  readonly released: number;
  /** The workers' Redis commands a job, the most sent first (scripts by name). */
  readonly commandsPerJob: Readonly<Record<string, number>>;
  /** `/metrics` of the dashboard once drained, bytes (the last setup of each tenant count). */
  readonly metricsBytes?: number;
}

/** `jobs` short requests, job i of tenant `t<i % tenants>` (none with 0), in that order. */
async function enqueue(redis: RedisClient, names: QueueNames, jobs: number, tenants: number) {
  const producer = new Producer({ redis, names, maxDepth: 0 });
  try {
    const requests = Array.from({ length: jobs }, (_, i) => shortCall(i, 16));
    if (tenants === 0) {
      await producer.enqueueMany(requests);
      return;
    }
    for (let i = 0; i < jobs; i += 100) {
      await Promise.all(
        requests
          .slice(i, i + 100)
          .map((r, j) => producer.enqueue(r, { tenant: `t${(i + j) % tenants}` })),
      );
    }
  } finally {
    await producer.close();
  }
}

/**
 * The longest command SLOWLOG kept since its reset (ms and name, a script by its own), and the
 * longest of each name, the five longest names: one slow call apart from a script always slow.
 */
async function longestCommands(
  redis: RedisClient,
  scripts: ReadonlyMap<string, string>,
  jobs: number,
): Promise<{
  ms: number;
  name: string;
  byName: Record<string, number>;
  usPerJob: Record<string, number>;
}> {
  const entries = (await redis.call('SLOWLOG', 'GET', '100000')) as [
    number,
    number,
    number,
    string[],
  ][];
  const byName = new Map<string, number>();
  const sums = new Map<string, number>();
  for (const [, , us, args] of entries) {
    const name = String(args[0]).toLowerCase();
    if (name === 'slowlog') continue; // the bench's own reset
    const sent = name.startsWith('evalsha');
    const whole = !sent && name.startsWith('eval');
    const script = sent
      ? scripts.get(String(args[1]))
      : whole && scripts.get(scriptTextKey(String(args[1])));
    // An EVAL is a script sent whole (its first use on a connection): named apart.
    const named = script ? (whole ? `eval:${script}` : script) : name;
    byName.set(named, Math.max(byName.get(named) ?? 0, us / 1000));
    sums.set(named, (sums.get(named) ?? 0) + us);
  }
  const largest = (m: Map<string, number>, n: number) =>
    [...m].sort(([, a], [, b]) => b - a).slice(0, n);
  const top = largest(byName, 5);
  const [name, ms] = top[0] ?? ['', 0];
  const usPerJob = largest(sums, 10).map(([k, us]) => [k, Math.round((us / jobs) * 10) / 10]);
  return { ms, name, byName: Object.fromEntries(top), usPerJob: Object.fromEntries(usPerJob) };
}

/** The workers' commands a job, the ten most sent. */
function commandsPerJob(reports: readonly WorkerProcessReport[], jobs: number) {
  const sums: Record<string, number> = {};
  for (const r of reports)
    for (const [k, v] of Object.entries(r.redis?.commands ?? {})) sums[k] = (sums[k] ?? 0) + v;
  return Object.fromEntries(
    Object.entries(sums)
      .sort(([, a], [, b]) => b - a)
      .slice(0, 10)
      .map(([k, v]) => [k, Math.round((v / jobs) * 100) / 100]),
  );
}

/** `/metrics` of a dashboard on the queue's prefix, in bytes. */
async function metricsBytes(redis: RedisClient, names: QueueNames): Promise<number> {
  let dash: DashboardHandle | undefined;
  try {
    dash = await startDashboard({ redis, prefix: names.prefix, port: 0, auth: { token: 'b' } });
    const res = await fetch(`${dash.baseUrl}/metrics`, { headers: { authorization: 'Bearer b' } });
    return Buffer.byteLength(await res.text());
  } finally {
    await dash?.close();
  }
}

/** One drain: enqueue, start the workers, drain, and read what Redis did meanwhile. */
function drain(
  url: string,
  mockUrl: string,
  s: Setup,
  jobs: number,
  withMetrics: boolean,
): Promise<Drain> {
  return withBenchScope(url, 'tenants', async (redis, names) => {
    await enqueue(redis, names, jobs, s.tenants);
    let children: WorkerChild[] = [];
    try {
      children = await startWorkers(s.workers, () => ({
        mode: s.mode,
        redisUrl: url,
        names,
        mockUrl,
        concurrency: CONCURRENCY,
        limiter: { windowMs: 60_000, limits: {} },
        countCommands: true,
        ...(s.fair ? { fairShare: {} } : {}),
      }));
      await redis.call('SLOWLOG', 'RESET');
      const cpu0 = await redisCpuSeconds(redis);
      const t0 = performance.now();
      for (const c of children) c.go();
      const wallMs = await drained(redis, names, jobs, t0, 600_000);
      const cpuS = (await redisCpuSeconds(redis)) - cpu0;
      const longest = await longestCommands(redis, await scriptNames(), jobs);
      const reports = await Promise.all(children.map((c) => c.stop()));
      children = [];
      const stats = await redis.hgetall(limiterKeys(names).stats);
      return {
        ...s,
        jobs,
        jobsPerSecond: jobs / (wallMs / 1000),
        redisCpuMsPerJob: (cpuS * 1000) / jobs,
        longestMs: longest.ms,
        longestCommand: longest.name,
        longestByCommand: longest.byName,
        usPerJobByCommand: longest.usPerJob,
        admitted: Number(stats['admitted'] ?? 0),
        released: Number(stats['released'] ?? 0),
        commandsPerJob: commandsPerJob(reports, jobs),
        ...(withMetrics ? { metricsBytes: await metricsBytes(redis, names) } : {}),
      };
    } finally {
      for (const c of children) c.kill();
    }
  });
}

/** Every setup, in the order run: bare BullMQ first, then by tenants, fair share, workers. */
function setups(tenantCounts: readonly number[]): Setup[] {
  const out: Setup[] = WORKERS.map((workers) => ({
    tenants: 0,
    fair: false,
    workers,
    mode: 'bare-call',
  }));
  for (const tenants of tenantCounts)
    for (const fair of [false, true])
      for (const workers of WORKERS) out.push({ tenants, fair, workers, mode: 'llmq' });
  return out;
}

const label = (d: Setup) =>
  d.mode === 'bare-call'
    ? `bare BullMQ, ${d.workers} worker${d.workers > 1 ? 's' : ''}`
    : `${d.tenants === 0 ? 'no tenant' : `${count(d.tenants)} tenants`}, fair share ${d.fair ? 'on' : 'off'}, ${d.workers} worker${d.workers > 1 ? 's' : ''}`;

/**
 * Many tenants, many jobs: drains of short jobs interleaved over 0, 200 and 2,000 tenants, fair
 * share off and on, 1, 2 and 4 worker processes × 50, against a mock with no latency and no limits,
 * on a Redis of its own (SLOWLOG and INFO are this run's alone); bare BullMQ making the same call
 * for Redis's CPU per job. The longest single command of each drain, and `/metrics` once drained.
 */
export async function tenantsScenario(ctx: ScenarioContext): Promise<ScenarioResult> {
  const jobs = ctx.smoke ? 200 : ctx.quick ? 1_000 : 4_000;
  const tenantCounts = ctx.smoke ? [0, 20] : [0, 200, 2_000];
  // At real-time priority where allowed: on this machine's two cores the workers, the mock and
  // the bench would otherwise preempt Redis in the middle of a command, and SLOWLOG's times
  // would be theirs.
  const server = await startPrivateRedis({ realtime: true });
  const realtime = server.realtime;
  const drains: Drain[] = [];
  try {
    const admin = benchRedis(server.url);
    await admin.config('SET', 'slowlog-log-slower-than', String(SLOWLOG_US));
    await admin.config('SET', 'slowlog-max-len', '100000');
    await admin.quit();
    await withMock({ latencyMs: 0, latencyPerOutputTokenMs: 0, outputShare: 0.5 }, async (mock) => {
      const all = setups(tenantCounts);
      for (const [i, s] of all.entries()) {
        ctx.log(`tenants: ${label(s)}`);
        const last = all[i + 1]?.tenants !== s.tenants;
        drains.push(await drain(server.url, mock.url, s, jobs, last && s.mode === 'llmq'));
      }
    });
  } finally {
    await server.stop();
  }
  return report(drains, jobs, realtime);
}

function report(drains: readonly Drain[], jobs: number, realtime: boolean): ScenarioResult {
  const llmq = drains.filter((d) => d.mode === 'llmq');
  const bares = drains.filter((d) => d.mode === 'bare-call');
  const bareOf = (d: Drain) => bares.find((b) => b.workers === d.workers);
  const same = (d: Drain, tenants: number, o: Partial<Setup> = {}) =>
    llmq.find(
      (x) =>
        x.tenants === tenants &&
        x.fair === (o.fair ?? d.fair) &&
        x.workers === (o.workers ?? d.workers),
    );
  const rows = drains.map((d) => [
    label(d),
    `${count(d.jobsPerSecond)} jobs/s`,
    d.mode === 'llmq' && d.tenants > 0
      ? `${(d.jobsPerSecond / (same(d, 0)?.jobsPerSecond ?? Number.NaN)).toFixed(2)}×`
      : '',
    millis(d.redisCpuMsPerJob, 3),
    d.longestMs > 0 ? `${millis(d.longestMs)} (${d.longestCommand})` : `< ${SLOWLOG_US / 1000} ms`,
    d.mode === 'llmq' ? `${count(d.released)} of ${count(d.admitted)}` : '',
    d.metricsBytes !== undefined ? `${count(d.metricsBytes / 1024)} KB` : '',
  ]);
  const tenanted = llmq.filter((d) => d.tenants > 0);
  const worst = (f: (d: Drain) => number) => Math.min(...tenanted.map(f));
  const share = worst((d) => d.jobsPerSecond / (same(d, 0)?.jobsPerSecond ?? Number.NaN));
  // Each 4-worker drain's rate against its 2-worker peer's, the worst.
  const fourOfTwo = (rows: readonly Drain[], peer: (d: Drain) => Drain | undefined) =>
    Math.min(
      ...rows
        .filter((d) => d.workers === 4)
        .map((d) => d.jobsPerSecond / (peer(d)?.jobsPerSecond ?? 0)),
    );
  const scaling = fourOfTwo(llmq, (d) => same(d, d.tenants, { workers: 2 }));
  const bareScaling = fourOfTwo(bares, () => bares.find((b) => b.workers === 2));
  const longest = Math.max(...llmq.map((d) => d.longestMs));
  // Each drain's Redis CPU a job against bare BullMQ's with as many workers.
  const cpuRatio = Math.max(
    ...llmq.map((d) => d.redisCpuMsPerJob / (bareOf(d)?.redisCpuMsPerJob ?? Number.NaN)),
  );
  const metrics = Math.max(...llmq.map((d) => d.metricsBytes ?? 0));
  const targets: Target[] = [
    {
      name: 'tenanted drains ≥ 0.8× the untenanted rate',
      met: share >= 0.8,
      detail: `worst ${share.toFixed(2)}×`,
    },
    {
      name: '4 workers never slower than 2',
      met: scaling >= 1,
      detail: `worst ${scaling.toFixed(2)}× (bare BullMQ ${bareScaling.toFixed(2)}×)`,
    },
    { name: 'longest command ≤ 2 ms', met: longest <= 2, detail: millis(longest) },
    {
      name: "Redis CPU per job ≤ 1.5× bare BullMQ's (as many workers)",
      met: cpuRatio <= 1.5,
      detail: `worst ${cpuRatio.toFixed(2)}×`,
    },
    {
      name: '/metrics ≤ 100 KB',
      met: metrics <= 100 * 1024,
      detail: `${count(metrics / 1024)} KB`,
    },
  ];
  return {
    name: 'tenants',
    title: `${count(jobs)} short jobs a drain, worker processes × ${CONCURRENCY}, no latency, no limits`,
    settings: { jobs, concurrency: CONCURRENCY, slowlogUs: SLOWLOG_US },
    headers: [
      'setup',
      'drain',
      '/ untenanted',
      'Redis CPU a job',
      'longest command',
      'released / admitted',
      '/metrics',
    ],
    rows,
    figures: drains,
    targets,
    notes: [
      `a Redis of its own (not REDIS_URL): SLOWLOG keeps commands slower than ${SLOWLOG_US / 1000} ms, INFO cpu is the drain’s`,
      realtime
        ? 'Redis at real-time priority (SCHED_FIFO): no process beside it preempts a command (its virtual machine’s host still may)'
        : 'Redis at normal priority (chrt refused): the longest command includes any time Redis was preempted mid-command',
      'Redis CPU a job includes the bench polling the counts every 25 ms',
      '/metrics is read once after the last drain of each tenant count (fair share on, 4 workers), its window still holding every tenant',
    ],
  };
}
