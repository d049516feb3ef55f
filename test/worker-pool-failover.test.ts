import { describe, expect, it } from 'vitest';
import type { MockAnthropicHandle } from '../testing/mock-anthropic/index.ts';
import { eachTestMocks } from './fixtures/mock-servers.ts';
import { onMock } from './fixtures/pool-mocks.ts';
import { allCompleted, completedEvents, poolsPerTest, request } from './fixtures/worker-harness.ts';

const openTestPool = poolsPerTest();
const startMock = eachTestMocks();

/** How the preferred deployment fails the first job's call. */
const failures: [string, (m: MockAnthropicHandle) => Promise<void>][] = [
  ['answers 529 overloaded', async (m) => m.setFaults({ overloaded: 1 })],
  ['drops the connection', async (m) => m.setFaults({ drop: 1 })],
  ['is down (connection refused)', (m) => m.close()],
];

describe('failover in a pool of deployments', () => {
  it.each(failures)(
    'a job whose call fails on a deployment that %s completes on another at once, ahead of the jobs queued behind it',
    async (_, fail) => {
      const [ma, mb] = await Promise.all([
        startMock({ latencyMs: 5 }),
        startMock({ latencyMs: 5 }),
      ]);
      await fail(ma);
      const pool = await openTestPool('failover');
      const a = onMock(ma, { name: 'a' });
      const b = onMock(mb, { name: 'b' });
      // The first job, then a backlog of the same priority behind it.
      const first = await pool.producer.enqueue(request('First: say hi.', 100));
      const backlog: string[] = [];
      for (let i = 0; i < 6; i++)
        backlog.push(await pool.producer.enqueue(request(`Job ${i}: say hi.`, 100)));
      // One call at a time; a's breaker opens at its first failure: the backlog goes to b.
      await pool.worker({
        concurrency: 1,
        deployments: [a, b],
        breaker: { threshold: 1, cooldownMs: 60_000 },
        backoff: { baseMs: 1, capMs: 5 },
        limiter: {},
      });
      const ids = [first, ...backlog];
      await allCompleted(pool, ids, 30_000);

      const job = (await pool.job(first))!;
      // It went to a, failed there, and was done on b before any job queued behind it.
      expect(job.returnvalue.deployment).toBe('b');
      const tries = job.data.history ?? [];
      expect(tries).toHaveLength(1);
      expect(tries[0]).toMatchObject({ deployment: 'a', outcome: 'retryable', counted: false });
      // The failure was a's: it spent none of the job's attempts.
      expect(job.returnvalue.attempts).toBe(1);
      for (const id of backlog) {
        const other = (await pool.job(id))!;
        expect(other.returnvalue.deployment).toBe('b');
        expect(other.finishedOn!).toBeGreaterThan(job.finishedOn!);
      }
      const events = await completedEvents(pool);
      for (const id of ids) expect(events.get(id)).toBe(1);
      expect(await pool.deadLetters()).toEqual([]);
      // b answered each job once: the first one's call was not made twice there.
      expect(mb.stats().responses).toEqual({ '200': ids.length });
    },
  );

  it("a job refused by a deployment's key (its spend limit) completes on another; that deployment leaves the pool", async () => {
    const [ma, mb] = await Promise.all([startMock({ latencyMs: 5 }), startMock({ latencyMs: 5 })]);
    const pool = await openTestPool('failover-key');
    const a = onMock(ma, { name: 'a' });
    const b = onMock(mb, { name: 'b' });
    ma.setOptions({ spendCappedKeys: [a.key] });
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await pool.producer.enqueue(request(`Job ${i}.`, 100)));
    await pool.worker({
      concurrency: 1,
      deployments: [a, b],
      breaker: { cooldownMs: 60_000 },
      limiter: {},
    });
    await allCompleted(pool, ids, 30_000);
    for (const id of ids) expect((await pool.job(id))!.returnvalue.deployment).toBe('b');
    const first = (await pool.job(ids[0]!))!;
    expect(first.data.history?.[0]).toMatchObject({
      deployment: 'a',
      outcome: 'final',
      status: 429,
    });
    expect(await pool.deadLetters()).toEqual([]);
    // Its breaker opened at the first refusal: a was asked once, not once a job.
    expect(ma.stats().responses).toEqual({ '429': 1 });
  });
});
