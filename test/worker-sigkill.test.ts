import { describe, expect, it } from 'vitest';
import { Limiter } from '../shared/limiter/limiter.ts';
import {
  allCompleted,
  bullKey,
  completedEvents,
  poolsPerTest,
  request,
} from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const openTestPool = poolsPerTest();

describe('a worker process killed mid-batch', () => {
  it('loses no job: the other process finishes all, each job has exactly one result, the slots come back', async () => {
    const pool = await openTestPool('sigkill', { latencyMs: 300 });

    // Short lock, stalled check and lease, so the killed process's jobs and slots come back
    // within seconds. The global cap of 6 slots means lapsed slots would block the survivor.
    const limiter = {
      windowMs: 5_000,
      limits: { tokens: 1_000_000 },
      leaseMs: 1_500,
    };
    const config = {
      concurrency: 3,
      maxInFlight: 6,
      limiter,
      lockDurationMs: 2_000,
      stalledIntervalMs: 1_000,
    };
    const a = await pool.recordingProxy();
    const b = await pool.recordingProxy();
    // Both processes are up before the batch arrives, so both take part in it.
    const [victim] = await Promise.all([
      pool.workerProcess({ ...config, baseURL: a.url }),
      pool.workerProcess({ ...config, baseURL: b.url }),
    ]);
    const ids: string[] = [];
    for (let i = 0; i < 30; i++) ids.push(await pool.producer.enqueue(request(`Batch item ${i}.`)));

    // Kill it while it has calls under way, a few jobs into the batch.
    await until(
      async () => (await pool.counts()).completed >= 4 && a.calls.some((c) => !c.done),
      60_000,
      5,
    );
    const cut = a.calls.filter((c) => !c.done).length;
    expect(await victim.kill('SIGKILL')).toBe('SIGKILL');
    expect(cut).toBeGreaterThan(0);

    await allCompleted(pool, ids, 90_000);
    const counts = await pool.counts();
    expect(counts).toMatchObject({
      completed: 30,
      failed: 0,
      active: 0,
      delayed: 0,
      wait: 0,
      prioritized: 0,
    });
    for (const id of ids)
      expect((await pool.job(id))!.returnvalue.message.usage.output_tokens).toBeGreaterThan(0);
    // Exactly one completion per job, never two.
    const events = await completedEvents(pool);
    expect([...events.keys()].sort()).toEqual([...ids].sort());
    expect([...events.values()].every((n) => n === 1)).toBe(true);
    // The jobs the killed process held were started again by the survivor.
    let restarted = 0;
    for (const id of ids)
      if (Number(await pool.redis.hget(bullKey(pool.names, id), 'ats')) > 1) restarted++;
    expect(restarted).toBeGreaterThanOrEqual(cut);
    expect(await pool.deadLetters()).toEqual([]);

    // The killed process's slots lapse with their leases.
    const lim = new Limiter({ redis: pool.redis, names: pool.names, windowMs: 5_000 });
    await until(async () => (await lim.snapshot()).inFlight === 0, 10_000);
  }, 240_000);
});
