import { Limiter } from '../../../shared/limiter/limiter.ts';
import { startPrivateRedis } from '../../../shared/private-redis.ts';
import {
  connectRedis,
  deleteKeysMatching,
  isCluster,
  type RedisClient,
} from '../../../shared/redis.ts';
import { slotMaster } from '../../../shared/redis-slot.ts';
import { masterCpuSeconds } from '../redis-info.ts';
import { benchNames } from '../redis-scope.ts';
import { startCluster } from '../redis-servers.ts';
import type { ScenarioContext, ScenarioResult, Target } from '../report.ts';
import { count, millis, percent } from '../table.ts';

const QUEUE_COUNTS = [1, 2, 4, 8] as const;
/** Admission loops per queue: its "workers" (acquire, then keep what was reserved). */
const LOOPS = 4;
const COST = { requests: 1, inputTokens: 10, outputTokens: 10 };
/** Each queue's own budget: requests per second (a sliding 1 s window). */
const PER_QUEUE_RPS = 200;
/** Queue names as a team might pick them (one per model or tenant group). */
const BASES = ['opus', 'sonnet', 'haiku', 'batch', 'tenant-a', 'tenant-b', 'tenant-c', 'eval'];

interface MasterShare {
  readonly master: string;
  readonly queues: number;
  readonly admissions: number;
  readonly share: number;
  readonly cpuMsPerAdmission: number;
  /** Admissions per second one Redis core would carry at this CPU per admission. */
  readonly perCore: number;
}

interface Cell {
  readonly deployment: 'single node' | 'cluster (3 masters)';
  readonly queues: number;
  readonly names: readonly string[];
  readonly perSecond: number;
  readonly masters: readonly MasterShare[];
}

/**
 * Admissions through the shared limiter with 1, 2, 4 and 8 queues, each with its own budget and
 * admission loops, on one Redis and on a 3-master cluster the scenario starts: the total rate,
 * and per master its share of the admissions and its Redis CPU per admission (INFO cpu before
 * and after), which projects what one Redis core carries.
 */
export async function clusterScenario(ctx: ScenarioContext): Promise<ScenarioResult> {
  const runMs = ctx.smoke ? 500 : ctx.quick ? 1_000 : 6_000;
  const cells: Cell[] = [];
  ctx.log('cluster: starting a Redis of its own and a 3-master, 3-replica cluster');
  // A private single node, so its INFO cpu counts this scenario alone.
  const single = await startPrivateRedis();
  const cluster = await startCluster(3).catch(async (err) => {
    await single.stop();
    throw err;
  });
  try {
    const queues = await spreadNames(cluster.url);
    for (const [deployment, url] of [
      ['single node', single.url],
      ['cluster (3 masters)', cluster.url],
    ] as const) {
      for (const n of QUEUE_COUNTS) {
        ctx.log(`cluster: ${deployment}, ${n} queue(s)`);
        cells.push(await measure(deployment, url, queues.slice(0, n), runMs));
      }
    }
  } finally {
    await cluster.stop();
    await single.stop();
  }

  const rows = cells.flatMap((c) =>
    c.masters.map((m, i) => [
      i === 0 ? c.deployment : '',
      i === 0 ? String(c.queues) : '',
      i === 0 ? count(c.perSecond) : '',
      m.master,
      String(m.queues),
      percent(m.share, 0),
      millis(m.cpuMsPerAdmission, 3),
      count(m.perCore),
    ]),
  );
  const spread = cells.filter((c) => c.deployment !== 'single node' && c.queues >= 4);
  const worst = Math.max(...spread.flatMap((c) => c.masters.map((m) => m.share)));
  const targets: Target[] = [
    {
      name: 'with 4+ queues on the cluster, no master carries more than half of the admissions',
      // 4 queues on 3 masters put 2 on one: exactly half at best, so to the percent.
      met: Math.round(worst * 100) <= 50,
      detail: `largest share of one master: ${percent(worst, 1)}`,
    },
  ];
  return {
    name: 'cluster',
    title: 'admissions per queue count, on one Redis and on a 3-master Redis Cluster',
    settings: {
      queueCounts: QUEUE_COUNTS,
      perQueueRps: PER_QUEUE_RPS,
      loopsPerQueue: LOOPS,
      runMs,
      cost: COST,
    },
    headers: [
      'deployment',
      'queues',
      'admissions/s',
      'master',
      'its queues',
      'its share',
      'Redis CPU ms/admission',
      'projected admissions/s per core',
    ],
    rows,
    figures: cells,
    targets,
    notes: [
      `each queue: ${LOOPS} loops of acquire + keep, under a budget of its own of ${PER_QUEUE_RPS} requests per sliding second, for ${runMs / 1000} s; admissions/s is near n × ${PER_QUEUE_RPS} while the deployment (and this machine) keeps up`,
      `queues: the first n of ${cells.at(-1)?.names.join(', ')}, suffixed so that they take the masters in turn (the bare names ${BASES.slice(0, 4).join(', ')} put 3 of 4 on one master: check where names land)`,
      'one queue is one hash slot: its admissions all go to one master; a cluster spreads queues, not one queue',
      'this machine has 2 cores shared by the bench, every Redis and the replicas: the total is bound by the client; the per-core projection (1 / CPU per admission) is the figure that carries to a real cluster',
    ],
  };
}

/** Runs `queues` queues' admission loops for `runMs` on `url`. */
async function measure(
  deployment: Cell['deployment'],
  url: string,
  names: readonly string[],
  runMs: number,
): Promise<Cell> {
  const redis = connectRedis(url);
  redis.on('error', () => {});
  const { prefix } = benchNames('cluster');
  try {
    await redis.ping();
    const limiters = names.map(
      (queue) =>
        new Limiter({
          redis,
          names: { prefix, queue },
          windowMs: 1_000,
          limits: { requests: PER_QUEUE_RPS },
          headroom: 0,
        }),
    );
    const masterOf = (l: Limiter) => nodeName(redis, l.allKeys[0]!);
    const counts = limiters.map(() => 0);
    // One warm-up admission each: scripts loaded, slots known, before the CPU is read.
    for (const l of limiters) await l.call(await l.acquire(COST)).failed({ charged: true });
    const before = await masterCpuSeconds(redis);
    const started = performance.now();
    const until = started + runMs;
    await Promise.all(
      limiters.flatMap((l, i) =>
        Array.from({ length: LOOPS }, async () => {
          while (performance.now() < until) {
            await l.call(await l.acquire(COST)).failed({ charged: true });
            counts[i]!++;
          }
        }),
      ),
    );
    const elapsedS = (performance.now() - started) / 1000;
    await Promise.all(limiters.map((l) => l.close()));
    const after = await masterCpuSeconds(redis);
    const total = counts.reduce((a, b) => a + b, 0);
    const masters = after.map(({ master, cpuS }): MasterShare => {
      const mine = limiters.map((l, i) => (masterOf(l) === master ? counts[i]! : -1));
      const admissions = mine.filter((n) => n >= 0).reduce((a, b) => a + b, 0);
      const cpuMs = (cpuS - (before.find((b) => b.master === master)?.cpuS ?? cpuS)) * 1000;
      const perAdmission = admissions > 0 ? cpuMs / admissions : Number.NaN;
      return {
        master,
        queues: mine.filter((n) => n >= 0).length,
        admissions,
        share: total > 0 ? admissions / total : 0,
        cpuMsPerAdmission: perAdmission,
        perCore: perAdmission > 0 ? 1000 / perAdmission : Number.NaN,
      };
    });
    return { deployment, queues: names.length, names, perSecond: total / elapsedS, masters };
  } finally {
    await deleteKeysMatching(redis, `${prefix}:*`).catch(() => {});
    await redis.quit().catch(() => redis.disconnect());
  }
}

/**
 * {@link BASES} with a suffix each, so that queue i lands on master i mod 3, as a team that
 * checks where its queues land would name them.
 */
async function spreadNames(clusterUrl: string): Promise<string[]> {
  const redis = connectRedis(clusterUrl);
  redis.on('error', () => {});
  try {
    await redis.ping();
    const masters = isCluster(redis)
      ? redis
          .nodes('master')
          .map((m) => `${m.options.host}:${m.options.port}`)
          .sort()
      : [nodeName(redis, '')];
    return BASES.map((base, i) => {
      for (let k = 1; ; k++) {
        const name = `${base}-${k}`;
        if (nodeName(redis, `{${name}}`) === masters[i % masters.length]) return name;
      }
    });
  } finally {
    redis.disconnect();
  }
}

/** `host:port` of the master holding `key` (the one node of a single Redis). */
function nodeName(redis: RedisClient, key: string): string {
  const node = isCluster(redis) ? slotMaster(redis, key) : redis;
  return `${node?.options.host ?? '127.0.0.1'}:${node?.options.port ?? 6379}`;
}
