import { describe, expect, it } from 'vitest';
import { Limiter } from '../shared/limiter/limiter.ts';
import { poolsPerTest, request, startCli } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const openTestPool = poolsPerTest();

describe('SIGTERM', () => {
  it('drains: the calls in flight finish and are stored, nothing new starts, the worker exits 0', async () => {
    const pool = await openTestPool('sigterm', { latencyMs: 1_000 });
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await pool.producer.enqueue(request(`Slow job ${i}.`)));
    const worker = startCli(
      ['worker', '--concurrency', '3'],
      pool.cliEnv({ LLMQ_TPM: '100000', LLMQ_WINDOW_S: '5' }),
    );
    try {
      // Three calls are under way at the provider (each takes a second).
      await until(() => pool!.mock.stats().admitted >= 3, 30_000);
      const before = await pool.counts();
      expect(before.active).toBe(3);
      expect(before.completed).toBe(0);

      expect(await worker.kill('SIGTERM'), worker.stderr()).toBe(0);
      expect(worker.stderr()).toContain('SIGTERM: draining calls in flight');

      const after = await pool.counts();
      expect(after).toMatchObject({ active: 0, completed: 3, failed: 0, delayed: 0 });
      expect(after.wait + after.prioritized).toBe(2);
      expect(pool.mock.stats().attempts).toBe(3);
      let stored = 0;
      for (const id of ids) {
        const job = (await pool.job(id))!;
        if (job.returnvalue) {
          stored++;
          expect(job.returnvalue.latencyMs).toBeGreaterThanOrEqual(950);
        } else {
          expect(job.processedOn ?? 0).toBe(0);
        }
      }
      expect(stored).toBe(3);
      const snap = await new Limiter({
        redis: pool.redis,
        names: pool.names,
        windowMs: 5_000,
      }).snapshot();
      expect(snap.inFlight).toBe(0);
      expect(snap.counters.settled).toBe(3);
    } finally {
      await worker.kill('SIGKILL');
    }
  });
});
