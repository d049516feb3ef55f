/**
 * A worker whose own event loop stalls past its silence bound (a long synchronous task, a GC
 * pause, a frozen VM) is not a silent provider: what the provider sent meanwhile waits in the
 * socket, and the call reads it before it is judged.
 */
import { describe, expect, it } from 'vitest';
import { allCompleted, poolsPerTest, request } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const openTestPool = poolsPerTest();

/** Blocks this process's event loop for `ms`, from the check phase (timers run next, not I/O). */
function stallLoop(ms: number): Promise<void> {
  return new Promise((resolve) =>
    setImmediate(() => {
      const end = performance.now() + ms;
      while (performance.now() < end) {
        // The stall itself.
      }
      resolve();
    }),
  );
}

describe('a worker whose event loop stalls mid-stream', () => {
  it('reads what came meanwhile instead of aborting the call at its silence bound', async () => {
    // A delta every 100 ms for 6 s; the worker's silence bound 1 s, its loop stalled 3 s.
    const pool = await openTestPool('stalled-loop', { latencyMs: 0, latencyPerOutputTokenMs: 100 });
    const worker = await pool.worker({ idleTimeoutMs: 1_000 });
    const id = await pool.producer.enqueue(request('A slow answer.', 60));
    await until(() => pool!.mock.stats().attempts === 1 && worker.inFlight() === 1, 20_000, 5);
    await stallLoop(3_000);
    await allCompleted(pool, [id], 30_000);

    expect(pool.mock.stats().attempts).toBe(1);
    const job = (await pool.job(id))!;
    expect(job.data.history ?? []).toEqual([]);
    expect(job.returnvalue.attempts).toBe(1);
  });
});
