/**
 * A worker process stopped (SIGSTOP) past its lock and lease with calls in flight, then resumed
 * (SIGCONT): when no other worker took its jobs, it takes them back and stores its results, so
 * each job is called once at the provider; when another did, the second call is counted and
 * logged, and each job still completes once.
 */
import { Worker as BullWorker } from 'bullmq';
import { afterEach, describe, expect, it } from 'vitest';
import { bullPrefix } from '../shared/keys.ts';
import { Limiter } from '../shared/limiter/limiter.ts';
import { readMetrics } from '../shared/metrics.ts';
import { duplicateRedis } from '../shared/redis.ts';
import {
  allCompleted,
  bullKey,
  completedEvents,
  openPool,
  type Pool,
  type Proc,
  request,
} from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

let pool: Pool | undefined;
let stopped: Proc | undefined;
afterEach(async () => {
  // A stopped process takes no SIGKILL until it is continued.
  stopped?.child.kill('SIGCONT');
  stopped = undefined;
  await pool?.cleanup();
  pool = undefined;
});

/** Short locks and leases, so a few seconds stopped outlast them. */
const config = {
  concurrency: 2,
  lockDurationMs: 2_000,
  stalledIntervalMs: 1_000,
  limiter: { windowMs: 5_000, limits: { tokens: 1_000_000 }, leaseMs: 1_500 },
};

/** Two jobs whose calls are under way in a worker process, which is then stopped past its lock. */
async function stoppedMidCall(label: string): Promise<{ p: Pool; ids: string[]; worker: Proc }> {
  const p = await openPool(label, { latencyMs: 1_500 });
  pool = p;
  const worker = await p.workerProcess(config);
  const ids = [
    await p.producer.enqueue(request('First long answer.')),
    await p.producer.enqueue(request('Second long answer.')),
  ];
  await until(() => p.mock.stats().attempts === 2, 20_000, 5);
  worker.child.kill('SIGSTOP');
  stopped = worker;
  // Its locks lapse: nothing renews them while it is stopped.
  for (const id of ids)
    await until(async () => (await p.redis.exists(bullKey(p.names, `${id}:lock`))) === 0, 10_000);
  return { p, ids, worker };
}

/** Runs BullMQ's stalled check (as any other worker would) until the jobs are back in wait. */
async function backToWait(p: Pool, ids: readonly string[]): Promise<void> {
  const checker = new BullWorker(p.names.queue, null, {
    connection: duplicateRedis(p.redis),
    prefix: bullPrefix(p.names),
    autorun: false,
    stalledInterval: 100,
  });
  try {
    await checker.startStalledCheckTimer();
    await until(async () => {
      const states = await Promise.all(ids.map((id) => p.queue.getJobState(id)));
      return states.every((s) => s === 'waiting');
    }, 10_000);
  } finally {
    await checker.close();
  }
}

function resume(worker: Proc): void {
  worker.child.kill('SIGCONT');
  stopped = undefined;
}

/** Once nothing is in flight any more: what the mock saw and the worker logged is final. */
async function settled(p: Pool): Promise<void> {
  const limiter = new Limiter({ redis: p.redis, names: p.names, windowMs: 5_000 });
  await until(async () => (await limiter.snapshot()).inFlight === 0, 20_000);
}

/** Every job completed once, each called once at the mock, its completion logged once stored. */
async function oneCallEach(p: Pool, ids: readonly string[], worker: Proc): Promise<void> {
  await allCompleted(p, ids, 30_000);
  await settled(p);
  expect(p.mock.stats().attempts).toBe(ids.length);
  const events = await completedEvents(p);
  for (const id of ids) expect(events.get(id)).toBe(1);
  // Its stderr reaches this process a little after the jobs' state does.
  const completedLines = () => worker.stderr().match(/job completed/g)?.length ?? 0;
  await until(() => completedLines() >= ids.length, 10_000);
  expect(completedLines()).toBe(ids.length);
  expect(worker.stderr()).not.toMatch(/Missing lock|handling failed|called twice/);
  expect((await readMetrics(p.redis, p.names))['duplicate_calls'] ?? 0).toBe(0);
}

describe('a worker resumed past its lock', () => {
  it('takes back the jobs the stalled check put back in wait and stores its results: one call each', async () => {
    const { p, ids, worker } = await stoppedMidCall('resume-wait');
    await backToWait(p, ids);
    resume(worker);
    await oneCallEach(p, ids, worker);
  }, 90_000);

  it('takes back the jobs still active under its lapsed lock and stores its results: one call each', async () => {
    const { p, ids, worker } = await stoppedMidCall('resume-active');
    expect(await Promise.all(ids.map((id) => p.queue.getJobState(id)))).toEqual([
      'active',
      'active',
    ]);
    resume(worker);
    await oneCallEach(p, ids, worker);
  }, 90_000);

  it('counts and logs the second call when another worker took the job meanwhile; each completes once', async () => {
    const { p, ids, worker } = await stoppedMidCall('resume-taken');
    // Another worker recovers the jobs (its stalled check) and calls them itself.
    await p.worker({ ...config, stalledIntervalMs: 200 });
    await until(() => p.mock.stats().attempts === 4, 20_000, 5);
    resume(worker);
    await allCompleted(p, ids, 30_000);
    await settled(p);
    await until(async () => (await readMetrics(p.redis, p.names))['duplicate_calls'] === 2, 10_000);

    const events = await completedEvents(p);
    for (const id of ids) expect(events.get(id)).toBe(1);
    await until(() => (worker.stderr().match(/job called twice/g)?.length ?? 0) >= 2, 10_000);
    expect(worker.stderr().match(/job called twice/g)).toHaveLength(2);
    expect(worker.stderr()).not.toMatch(/job completed|handling failed/);
    expect(p.mock.stats().attempts).toBe(4);
  }, 90_000);
});
