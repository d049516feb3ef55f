import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  openFailoverPool,
  runThroughFailover,
  TOKENS,
  WINDOW_MS,
} from './fixtures/failover-run.ts';
import { CLUSTER_START_MS, startCluster, type TestCluster } from './fixtures/redis-servers.ts';
import {
  allCompleted,
  openPool,
  type Pool,
  type Proc,
  request,
  startCli,
} from './fixtures/worker-harness.ts';
import { testNames } from './helpers.ts';

let cluster: TestCluster;
let pools: Pool[] = [];
let procs: Proc[] = [];
const closers: (() => Promise<void>)[] = [];

beforeAll(async () => {
  cluster = await startCluster(3);
}, CLUSTER_START_MS);

afterEach(async () => {
  await Promise.all(procs.map((p) => p.kill('SIGKILL')));
  procs = [];
  await Promise.all(pools.map((p) => p.cleanup()));
  pools = [];
  for (const close of closers.splice(0)) await close();
});

afterAll(async () => {
  await cluster?.stop();
});

/** The port of the master that serves a queue (all its keys share the tag `{queue}`). */
const masterOf = async (queue: string) => cluster.masterOfSlot(await cluster.keySlot(`{${queue}}`));

const CALL = request('Hi', 200);

describe('llmq on a 3-master, 3-replica Redis Cluster', () => {
  it('runs the published scenario with three `llmq worker` processes: 60/60, zero 429s, no window over the limit', async () => {
    const pool = await openPool(
      'cl-published',
      { windowMs: WINDOW_MS, limits: { tokens: TOKENS }, algorithm: 'sliding' },
      { tokens: TOKENS },
      { redisUrl: cluster.url },
    );
    pools.push(pool);
    const ids: string[] = [];
    for (let i = 0; i < 60; i++) ids.push(await pool.producer.enqueue(CALL));
    const args = ['worker', '--tpm', String(TOKENS), '--window', String(WINDOW_MS / 1000)];
    procs = [0, 1, 2].map(() => startCli(args, pool.cliEnv()));
    await allCompleted(pool, ids, 120_000);

    const stats = pool.mock.stats();
    expect(stats.admitted).toBe(60);
    expect(stats.responses['429'] ?? 0).toBe(0);
    expect(stats.worstWindow.tokens).toBeLessThanOrEqual(TOKENS);
    expect(await pool.counts()).toMatchObject({ completed: 60, failed: 0, active: 0 });
    for (const w of procs) expect(await w.kill('SIGTERM'), w.stderr()).toBe(0);
  }, 180_000);

  it('puts queues on different masters, and each keeps its own budget', async () => {
    // Three queues whose hash tags land on three different masters.
    const picked = new Map<number, string>();
    while (picked.size < 3) {
      const { queue } = testNames();
      picked.set(await masterOf(queue), queue);
    }
    const limit = 1_500;
    const jobs = 12;
    const prefix = testNames('cl-budget').prefix;
    const runs = await Promise.all(
      [...picked.values()].map(async (queue) => {
        const pool = await openPool(
          'cl-budget',
          { windowMs: 5_000, limits: { tokens: limit }, algorithm: 'sliding' },
          { tokens: limit },
          { redisUrl: cluster.url, names: { prefix, queue } },
        );
        pools.push(pool);
        return pool;
      }),
    );
    const ids = await Promise.all(
      runs.map(async (pool) => {
        const mine: string[] = [];
        for (let i = 0; i < jobs; i++) mine.push(await pool.producer.enqueue(CALL));
        procs.push(
          await pool.workerProcess({
            limiter: { windowMs: 5_000, limits: { tokens: limit } },
            concurrency: 4,
          }),
        );
        return mine;
      }),
    );
    await Promise.all(runs.map((pool, i) => allCompleted(pool, ids[i]!, 90_000)));
    // Each queue's jobs are on its master: the budgets were kept apart by three masters.
    for (const [master, queue] of picked) {
      expect(await masterOf(queue)).toBe(master);
    }
    for (const pool of runs) {
      const stats = pool.mock.stats();
      expect(stats.admitted).toBe(jobs);
      expect(stats.responses['429'] ?? 0).toBe(0);
      expect(stats.worstWindow.tokens).toBeLessThanOrEqual(limit);
      expect(await pool.counts()).toMatchObject({ completed: jobs, failed: 0 });
    }
  }, 180_000);

  it('a master SIGKILLed mid-run: its replica takes over, every job completes once, no window over the limit, every worker carries on', async () => {
    const run = await openFailoverPool('cl-failover', cluster.url);
    closers.push(() => run.close());
    const port = await masterOf(run.pool.names.queue);
    await runThroughFailover(run, {
      jobs: 30,
      failAfter: 8,
      fail: () => cluster.killMaster(port),
    });
  }, 180_000);
});
