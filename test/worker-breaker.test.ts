import { afterEach, describe, expect, it } from 'vitest';
import { breakerKey } from '../shared/keys.ts';
import {
  allCompleted,
  openPool,
  type Pool,
  type RecordingProxy,
  request,
  startRecordingProxy,
} from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

let pool: Pool | undefined;
let proxy: RecordingProxy | undefined;
afterEach(async () => {
  await proxy?.close();
  proxy = undefined;
  await pool?.cleanup();
  pool = undefined;
});

describe('the circuit breaker', () => {
  it('opens in an outage, lets only trial calls through, dead-letters nothing, and closes when a trial succeeds', async () => {
    pool = await openPool('breaker', { faults: { overloaded: 1 }, latencyMs: 5 });
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

    await until(async () => (await pool!.breakerState()) === 'open', 10_000);
    const openedAt = Date.now();
    const callsAtOpen = pool.mock.stats().attempts;
    // The outage goes on for several cool-downs; nothing may be dead-lettered meanwhile.
    const outageMs = 4_000;
    const states = new Set<string>();
    while (Date.now() - openedAt < outageMs) {
      states.add(await pool.breakerState());
      const c = await pool.counts();
      expect(c.failed).toBe(0);
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(await pool.deadLetters()).toEqual([]);
    const trials = pool.mock.stats().attempts - callsAtOpen;
    // About one trial a cool-down (plus the calls already under way when it opened).
    expect(trials).toBeGreaterThanOrEqual(2);
    expect(trials).toBeLessThanOrEqual(Math.ceil(outageMs / cooldownMs) + 4);
    expect(states.has('open')).toBe(true);
    const opened = Number(await pool.redis.hget(breakerKey(pool.names), 'opened_count'));
    expect(opened).toBeGreaterThanOrEqual(2); // failed trials opened it again

    pool.mock.setFaults({});
    await until(async () => (await pool!.breakerState()) === 'closed', 10_000);
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
    // Every call takes 400 ms to fail, so all three are under way when the first failure
    // opens the breaker. With one attempt each, a counted failure would dead-letter its job.
    pool = await openPool('breakerflight', { faults: { overloaded: 1 } });
    proxy = await startRecordingProxy(pool.mock.url, { delayMs: 400 });
    const ids: string[] = [];
    for (let i = 0; i < 3; i++)
      ids.push(await pool.producer.enqueue(request(`Job ${i}.`), { attempts: 1 }));
    await pool.worker({
      baseURL: proxy.url,
      concurrency: 3,
      breaker: { threshold: 1, cooldownMs: 1_000 },
      limiter: { windowMs: 5_000, limits: { tokens: 100_000 } },
    });
    await until(() => proxy!.calls.filter((c) => c.status === 529).length >= 3, 10_000);
    expect(proxy.calls.slice(0, 3).map((c) => c.status)).toEqual([529, 529, 529]);
    expect(Math.max(...proxy.calls.slice(0, 3).map((c) => c.at)) - proxy.calls[0]!.at).toBeLessThan(
      300,
    );
    await new Promise((r) => setTimeout(r, 200));
    expect(await pool.deadLetters()).toEqual([]);

    pool.mock.setFaults({});
    await allCompleted(pool, ids, 15_000);
    expect(await pool.deadLetters()).toEqual([]);
    for (const id of ids) {
      expect((await pool.job(id))!.data.history?.every((h) => !h.counted)).toBe(true);
    }
  });
});
