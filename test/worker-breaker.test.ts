import { describe, expect, it } from 'vitest';
import { breakerKey } from '../shared/keys.ts';
import { allCompleted, poolsPerTest, request } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const openTestPool = poolsPerTest();

describe('the circuit breaker', () => {
  it('opens in an outage, lets only trial calls through, dead-letters nothing, and closes when a trial succeeds', async () => {
    const pool = await openTestPool('breaker', { faults: { overloaded: 1 }, latencyMs: 5 });
    const ids: string[] = [];
    // Three attempts with at most 100 ms of backoff: without the breaker every job would be
    // dead-lettered within half a second of this outage.
    for (let i = 0; i < 4; i++)
      ids.push(await pool.producer.enqueue(request(`Job ${i}.`), { attempts: 3 }));
    const cooldownMs = 1_000;
    await pool.worker({
      concurrency: 4,
      breaker: { threshold: 3, cooldownMs },
      backoff: { baseMs: 50, capMs: 100 },
      limiter: { windowMs: 5_000, limits: { tokens: 100_000 } },
    });

    await until(async () => (await pool.breakerState()) === 'open', 10_000);
    const openings = async () =>
      Number(await pool.redis.hget(breakerKey(pool.names), 'opened_count'));
    const openedAtFirst = await openings();
    const callsAtOpen = pool.mock.stats().attempts;
    // The outage goes on until failed trials opened it three times more; nothing may be
    // dead-lettered meanwhile.
    const states = new Set<string>();
    await until(async () => {
      states.add(await pool.breakerState());
      expect((await pool.counts()).failed).toBe(0);
      return (await openings()) >= openedAtFirst + 3;
    }, 30_000);
    expect(await pool.deadLetters()).toEqual([]);
    // Only trials went out while it was open: each failed one opened it again (one more may
    // be under way now).
    const reopened = (await openings()) - openedAtFirst;
    const trials = pool.mock.stats().attempts - callsAtOpen;
    expect(trials).toBeGreaterThanOrEqual(reopened);
    expect(trials).toBeLessThanOrEqual(reopened + 1);
    expect(states.has('open')).toBe(true);

    pool.mock.setFaults({});
    await until(async () => (await pool.breakerState()) === 'closed', 10_000);
    await allCompleted(pool, ids, 15_000);
    expect(await pool.deadLetters()).toEqual([]);
    for (const id of ids) {
      const job = (await pool.job(id))!;
      const counted = (job.data.history ?? []).filter((h) => h.counted).length;
      expect(counted).toBeLessThan(3);
      expect(job.returnvalue.attempts).toBe(counted + 1);
    }
  });

  it('calls already under way when it opens spend no attempt', async () => {
    // The proxy holds the calls until all three arrived, so all are under way when the first
    // failure opens the breaker. With one attempt each, a counted failure would dead-letter its job.
    const pool = await openTestPool('breakerflight', { faults: { overloaded: 1 } });
    const proxy = await pool.recordingProxy({ holdUntil: 3 });
    const ids: string[] = [];
    for (let i = 0; i < 3; i++)
      ids.push(await pool.producer.enqueue(request(`Job ${i}.`), { attempts: 1 }));
    await pool.worker({
      baseURL: proxy.url,
      concurrency: 3,
      breaker: { threshold: 1, cooldownMs: 1_000 },
      limiter: { windowMs: 5_000, limits: { tokens: 100_000 } },
    });
    await until(() => proxy.calls.filter((c) => c.status === 529).length >= 3, 10_000);
    expect(proxy.calls.slice(0, 3).map((c) => c.status)).toEqual([529, 529, 529]);
    // Each job has its failure on record (it is back in line), none dead-lettered.
    await until(async () => {
      const jobs = await Promise.all(ids.map((id) => pool.job(id)));
      return jobs.every((j) => (j?.data.history?.length ?? 0) >= 1);
    }, 10_000);
    expect(await pool.deadLetters()).toEqual([]);

    pool.mock.setFaults({});
    await allCompleted(pool, ids, 15_000);
    expect(await pool.deadLetters()).toEqual([]);
    for (const id of ids) {
      expect((await pool.job(id))!.data.history?.every((h) => !h.counted)).toBe(true);
    }
  });
});
