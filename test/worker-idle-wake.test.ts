import { describe, expect, it } from 'vitest';
import { CircuitBreaker } from '../worker/breaker.ts';
import { allCompleted, type Pool, poolsPerTest, request } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const openTestPool = poolsPerTest();

/** Far beyond any wait below: a job these tests see start was woken for, not looked for. */
const NEVER_LOOKS = 600_000;

const limiter = { windowMs: 5_000, limits: { tokens: 100_000 } };

/** Whether the pool's idle worker is blocked on BullMQ's marker (CLIENT LIST flag `b`). */
async function idleWorkerBlocked(p: Pool): Promise<boolean> {
  const list = (await p.redis.call('CLIENT', 'LIST')) as string;
  return list
    .split('\n')
    .some(
      (l) =>
        l.includes(` name=llmq:idle:${p.names.queue} `) &&
        /\bflags=\w*b/.test(l) &&
        l.includes(' cmd=bzpopmin '),
    );
}

describe('an idle worker wakes when a job arrives', () => {
  it('starts a job enqueued while it sleeps, though its next look at the queue is far off', async () => {
    const pool = await openTestPool('idle-wake');
    await pool.worker({ limiter, idleCheckMs: NEVER_LOOKS });
    const first = await pool.producer.enqueue(request('First.'));
    await allCompleted(pool, [first]);
    // The queue is empty again: the worker sleeps on the marker.
    await until(() => idleWorkerBlocked(pool!));
    const second = await pool.producer.enqueue(request('Second.'));
    await allCompleted(pool, [second]);
    expect(pool.mock.stats().attempts).toBe(2);
    // And it goes back to sleep rather than looking again and again.
    await until(() => idleWorkerBlocked(pool!));
  });

  it('stores a result at once when no job waits behind it', async () => {
    const pool = await openTestPool('idle-store');
    // A result would otherwise wait this long for a next fetch to ride with.
    await pool.worker({ limiter, idleCheckMs: NEVER_LOOKS, handoffWaitMs: NEVER_LOOKS });
    const id = await pool.producer.enqueue(request('Alone.'));
    await allCompleted(pool, [id]);
  });

  it('starts a retried job when its backoff ends while it sleeps', async () => {
    const pool = await openTestPool('idle-delayed', { faults: { overloaded: 1 } });
    await pool.worker({
      limiter,
      idleCheckMs: NEVER_LOOKS,
      backoff: { baseMs: 400, capMs: 400 },
      breaker: { threshold: 1_000 },
    });
    const id = await pool.producer.enqueue(request('Retried.'), { attempts: 5 });
    // The first call fails; the job waits out its backoff in the delayed set.
    await until(async () => (await pool!.counts()).delayed === 1);
    pool.mock.setFaults({});
    await allCompleted(pool, [id]);
    const job = (await pool.job(id))!;
    expect(job.data.history?.length).toBeGreaterThanOrEqual(1);
  });

  it('sees a breaker another process opened while it slept: the job that wakes it waits for it', async () => {
    const pool = await openTestPool('idle-breaker');
    // No cached "closed": the worker asks Redis each time, and the check must be of its waking.
    const breaker = { cacheMs: 0, cooldownMs: 300 };
    const waited = new Map<unknown, unknown>();
    const logger = {
      info: (_: string, f?: Record<string, unknown>) => waited.set(f?.['job'], f?.['gateWaitMs']),
      warn() {},
    };
    await pool.worker({ limiter, idleCheckMs: NEVER_LOOKS, breaker, logger });
    await allCompleted(pool, [await pool.producer.enqueue(request('First.'))]);
    await until(() => idleWorkerBlocked(pool!));
    const elsewhere = new CircuitBreaker(pool.redis, pool.names, breaker);
    expect((await elsewhere.recordFailure(true)).opened).toBe(true);
    const second = await pool.producer.enqueue(request('Second.'));
    await allCompleted(pool, [second]);
    // Its line is logged once its result is stored, a moment after.
    await until(() => waited.has(second));
    // It waited for the cool-down, went as the trial call, and its success closed the breaker.
    expect(waited.get(second)).toBeGreaterThan(0);
    expect(await pool.breakerState()).toBe('closed');
    expect(pool.mock.stats().attempts).toBe(2);
  });

  it('stops at once while it sleeps', async () => {
    const pool = await openTestPool('idle-stop');
    const worker = await pool.worker({ limiter, idleCheckMs: NEVER_LOOKS });
    await until(() => idleWorkerBlocked(pool!));
    await worker.stop();
    expect(await idleWorkerBlocked(pool)).toBe(false);
  });
});
