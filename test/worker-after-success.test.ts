import { afterEach, describe, expect, it } from 'vitest';
import { allCompleted, openPool, type Pool, request } from './fixtures/worker-harness.ts';
import { newRedis, until } from './helpers.ts';

let pool: Pool | undefined;
let conn: ReturnType<typeof newRedis> | undefined;
afterEach(async () => {
  await pool?.cleanup();
  pool = undefined;
  await conn?.quit().catch(() => conn?.disconnect());
  conn = undefined;
});

describe('after a successful call', () => {
  it('stores the result once and never calls again, even when the limiter’s Redis goes away', async () => {
    pool = await openPool('aftersuccess', { latencyMs: 800 });
    const id = await pool.producer.enqueue(request('Only once, please.'));
    // Short locks and leases, so a job left active would be recovered, and called again, by
    // the second worker within seconds.
    const short = { lockDurationMs: 1_000, stalledIntervalMs: 500 };
    const limiter = { windowMs: 5_000, limits: { tokens: 100_000 }, leaseMs: 1_000 };
    conn = newRedis();
    try {
      await pool.worker({ redis: conn, ...short, limiter });
      await until(() => pool!.mock.stats().admitted === 1, 10_000, 5);
      // The call is under way; the connection the limiter, breaker and metrics use goes away
      // (BullMQ's own connection stays).
      conn.disconnect();
      await pool.worker({ ...short, limiter });

      await allCompleted(pool, [id], 15_000);
      // Long enough for a stalled job to be recovered and called again.
      await new Promise((r) => setTimeout(r, 2_500));
      expect(pool.mock.stats().attempts).toBe(1);
      const job = (await pool.job(id))!;
      expect(await pool.queue.getJobState(id)).toBe('completed');
      expect(job.returnvalue.attempts).toBe(1);
      expect(job.attemptsStarted).toBe(1);
    } finally {
      // Back for the worker's own shutdown.
      await conn.connect().catch(() => {});
    }
  });
});
