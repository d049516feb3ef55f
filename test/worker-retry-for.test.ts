import { describe, expect, it } from 'vitest';
import { breakerKey } from '../shared/keys.ts';
import { CircuitBreaker } from '../worker/breaker.ts';
import { poolsPerTest, request } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const openTestPool = poolsPerTest();

const limiter = { windowMs: 60_000, limits: { tokens: 100_000_000 } };

describe('transient failures are retried by time, not by count', () => {
  it('15% 529s, 10% 500s and 5% dropped connections over 500 jobs: none dead-lettered', async () => {
    const pool = await openTestPool('retryfor-mix', {
      faults: { overloaded: 0.15, serverError: 0.1, drop: 0.05 },
      latencyMs: 1,
    });
    // Two attempts each: counted, about 45 of the 500 would fail twice and be dead-lettered.
    const requests = Array.from({ length: 500 }, (_, i) => request(`Job ${i}.`, 20));
    const ids = await pool.producer.enqueueMany(requests, { attempts: 2 });
    expect(new Set(ids).size).toBe(500);
    await pool.worker({
      concurrency: 50,
      backoff: { baseMs: 10, capMs: 100 },
      // The breaker may open on a run of failures; a short cool-down keeps the test quick.
      breaker: { cooldownMs: 200 },
      limiter,
    });
    await until(
      async () => {
        const c = await pool!.counts();
        if (c.failed > 0) throw new Error(`${c.failed} jobs failed`);
        return c.completed === 500;
      },
      120_000,
      100,
    );
    expect(await pool.deadLetters()).toEqual([]);

    const stats = pool.mock.stats();
    expect(stats.faults.overloaded).toBeGreaterThan(0);
    expect(stats.faults.serverError).toBeGreaterThan(0);
    expect(stats.faults.drop).toBeGreaterThan(0);
    let transient = 0;
    let overAttempts = 0;
    const jobs = await pool.queue.getJobs(['completed'], 0, -1);
    expect(jobs).toHaveLength(500);
    for (const job of jobs) {
      const history = job.data.history ?? [];
      for (const h of history) expect(h).toMatchObject({ transient: true, counted: false });
      transient += history.length;
      if (history.length >= 2) overAttempts++;
      expect(job.returnvalue.attempts).toBe(1);
      if (history.length > 0) expect(job.data.retrying?.since).toBeGreaterThan(0);
    }
    // Every fault the mock injected was seen, and retried, by a job.
    expect(transient).toBe(stats.faults.overloaded + stats.faults.serverError + stats.faults.drop);
    // Jobs that failed more often than their attempts allow still completed.
    expect(overAttempts).toBeGreaterThan(0);
  }, 150_000);

  it('dead-letters a job whose provider stays down past its retryFor, saying so', async () => {
    const pool = await openTestPool('retryfor-down', { faults: { overloaded: 1 } });
    // One job sets its own retryFor; the other has the worker's.
    const own = await pool.producer.enqueue(request('Mine.'), { attempts: 1, retryForMs: 1_000 });
    const worker = await pool.producer.enqueue(request('The worker’s.'), { attempts: 1 });
    await pool.worker({
      retryForMs: 600,
      backoff: { baseMs: 50, capMs: 200 },
      // Kept out of this test: an open breaker stops the clock.
      breaker: { threshold: 1_000 },
      limiter,
    });
    await until(async () => (await pool!.counts()).failed === 2, 30_000);

    const letters = await pool.deadLetters();
    expect(letters.map((l) => l.jobId).sort()).toEqual([own, worker].sort());
    const span = /^transient failures for (\d+(?:\.\d+)?)(ms|s), past its retryFor of /;
    for (const [id, retryForMs, shown] of [
      [own, 1_000, '1s'],
      [worker, 600, '600ms'],
    ] as const) {
      const letter = letters.find((l) => l.jobId === id)!;
      expect(letter.reason).toMatch(span);
      expect(letter.reason.endsWith(`retryFor of ${shown}: 529 overloaded_error: Overloaded`)).toBe(
        true,
      );
      expect(letter).toMatchObject({ errorClass: 'OverloadedError', status: 529 });
      // More calls than its one attempt, each one kept, none of them spending it.
      expect(letter.attempts.length).toBeGreaterThan(1);
      for (const a of letter.attempts)
        expect(a).toMatchObject({ outcome: 'retryable', transient: true, counted: false });
      // Not given up before its time: the clock started at its first failure.
      expect(letter.data.retrying!.since).toBeGreaterThanOrEqual(letter.attempts[0]!.at);
      expect(letter.deadAt - letter.data.retrying!.since).toBeGreaterThanOrEqual(retryForMs);
    }
    const calls = letters.reduce((n, l) => n + l.attempts.length, 0);
    expect(pool.mock.stats().attempts).toBe(calls);
  });

  it('an outage behind the open breaker, longer than retryFor, dead-letters nothing', async () => {
    const pool = await openTestPool('retryfor-outage', { faults: { overloaded: 1 } });
    const id = await pool.producer.enqueue(request('Wait it out.'), { retryForMs: 1_000 });
    const cooldownMs = 300;
    await pool.worker({
      backoff: { baseMs: 20, capMs: 50 },
      breaker: { threshold: 2, cooldownMs, cacheMs: 0 },
      limiter,
    });
    // Five openings: four failed trials, each at least a cool-down after the last, so the
    // outage has lasted longer than the job's retryFor.
    await until(async () => {
      if ((await pool!.counts()).failed > 0) throw new Error('the job was dead-lettered');
      return Number(await pool!.redis.hget(breakerKey(pool!.names), 'opened_count')) >= 5;
    }, 30_000);
    expect(await pool.deadLetters()).toEqual([]);

    pool.mock.setFaults({});
    await until(async () => (await pool!.queue.getJobState(id)) === 'completed', 30_000);
    expect(await pool.deadLetters()).toEqual([]);
    const job = (await pool.job(id))!;
    expect(job.data.history?.length).toBeGreaterThanOrEqual(6);
    // The breaker kept the outage's length, which the job's clock left out.
    const { state, outageMs } = await new CircuitBreaker(pool.redis, pool.names).state();
    expect(state).toBe('closed');
    expect(outageMs).toBeGreaterThanOrEqual(4 * cooldownMs);
  });
});
