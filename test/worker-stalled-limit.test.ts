import { describe, expect, it } from 'vitest';
import { poolsPerTest, request } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const openTestPool = poolsPerTest();

describe('a job whose worker dies with it more often than allowed', () => {
  it('is dead-lettered, not run again and not left in the failed set unexplained', async () => {
    const pool = await openTestPool('stalled-limit', { latencyMs: 4_000 });
    const config = {
      concurrency: 1,
      limiter: { windowMs: 5_000, limits: { tokens: 1_000_000 }, leaseMs: 1_500 },
      lockDurationMs: 1_000,
      stalledIntervalMs: 300,
      maxStalledCount: 0,
    };
    const victim = await pool.workerProcess(config);
    const id = await pool.producer.enqueue(request('This one takes its workers down.'));
    await until(async () => pool!.mock.stats().attempts >= 1, 15_000);
    await victim.kill('SIGKILL');

    // A second worker's stalled check gives the job up; the same worker then takes it and
    // dead-letters it instead of calling the provider again.
    await pool.worker({ ...config, limiter: config.limiter });
    await until(async () => (await pool!.deadLetters()).length === 1, 20_000);
    const [letter] = await pool.deadLetters();
    expect(letter).toMatchObject({ jobId: id, errorClass: 'StalledJobError' });
    expect(letter!.reason).toMatch(/worker died with it/);
    expect(await pool.queue.getJobState(id)).toBe('failed');
    expect(pool.mock.stats().attempts).toBe(1);
  });
});
