/**
 * A pool with a deployment that accepts calls and never answers (a load balancer gone silent):
 * its calls are aborted at the first byte's bound and their jobs move to the others, and until
 * then it holds no more than its share of the slots, so the others keep working.
 */
import { describe, expect, it } from 'vitest';
import { breakerKey } from '../shared/keys.ts';
import { eachTestMocks } from './fixtures/mock-servers.ts';
import { onMock } from './fixtures/pool-mocks.ts';
import {
  allCompleted,
  completedEvents,
  type Pool,
  poolsPerTest,
  request,
} from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const openTestPool = poolsPerTest();
const startMock = eachTestMocks();

/**
 * Limits configured: no model waits for a first answer to learn its limits from (a pool's first
 * call, were it to the silent one, would hold the model until its bound).
 */
const limiter = { limits: { tokens: 1_000_000 } };

async function enqueue(p: Pool, n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) ids.push(await p.producer.enqueue(request(`Job ${i}: say hi.`)));
  return ids;
}

/** Two deployments of equal preference: `silent` never answers, `live` does. */
async function silentPair(label: string) {
  const [silent, live] = await Promise.all([
    startMock({ faults: { hang: 1 } }),
    startMock({ latencyMs: 20 }),
  ]);
  const pool = await openTestPool(label);
  const deployments = [
    onMock(silent, { name: 'silent', preference: 1 }),
    onMock(live, { name: 'live', preference: 1 }),
  ];
  return { silent, live, deployments, p: pool };
}

describe('a pool with a deployment that never answers', () => {
  it('moves each job whose first byte does not come to the other; every job completes once, none dead', async () => {
    const { silent, live, p } = await silentPair('silent-move');
    // A short bound on the silent one, its own; the live one keeps the worker's (20 s).
    const deployments = [
      onMock(silent, { name: 'silent', preference: 1, firstByteTimeoutMs: 300 }),
      onMock(live, { name: 'live', preference: 1 }),
    ];
    await p.worker({
      concurrency: 4,
      deployments,
      breaker: { threshold: 2, cooldownMs: 60_000 },
      limiter: {},
    });
    const ids = await enqueue(p, 12);
    await allCompleted(p, ids, 30_000);

    const events = await completedEvents(p);
    for (const id of ids) expect(events.get(id)).toBe(1);
    expect(await p.deadLetters()).toEqual([]);
    const jobs = await Promise.all(ids.map((id) => p.job(id)));
    expect(jobs.map((j) => j!.returnvalue.deployment)).toEqual(ids.map(() => 'live'));
    // Each call the silent one took was aborted at the bound and its job moved, no attempt spent.
    const tries = jobs.flatMap((j) => j!.data.history ?? []).filter((h) => h.outcome !== 'ok');
    expect(tries.length).toBe(silent.stats().attempts);
    expect(tries.length).toBeGreaterThan(0);
    for (const t of tries)
      expect(t).toMatchObject({
        deployment: 'silent',
        counted: false,
        errorClass: 'ResponseTimeoutError',
      });
    for (const j of jobs) expect(j!.returnvalue.attempts).toBe(1);
    expect(silent.stats()).toMatchObject({ admitted: 0, responses: { hung: tries.length } });
    expect(live.stats().responses).toEqual({ '200': 12 });
    // Its breaker opened: it takes no more calls until its cool-down ends.
    expect(await p.redis.hget(breakerKey(p.names, 'silent'), 'state')).toBe('open');
  });

  it('holds at most its share of a worker’s slots while it hangs: the other completes every job meanwhile', async () => {
    const { silent, live, deployments, p } = await silentPair('silent-share');
    // The first byte's bound is long: for the whole test the silent one holds what it took.
    const worker = await p.worker({
      concurrency: 4,
      deployments,
      firstByteTimeoutMs: 120_000,
      limiter,
    });
    await enqueue(p, 12);
    await until(async () => (await p.counts()).completed === 10, 5_000).catch(async (e) => {
      console.log(
        await p.counts(),
        silent.stats().attempts,
        live.stats().responses,
        worker.inFlight(),
      );
      throw e;
    });

    // Half the slots (the default share in a pool of two), no more: the live one had the rest.
    expect(silent.stats().attempts).toBe(2);
    expect(live.stats().responses['200']).toBeGreaterThanOrEqual(10);
    expect(worker.inFlight()).toBeGreaterThanOrEqual(2);
  });

  it('holds at most its share of the fleet’s slots (--max-in-flight) across workers', async () => {
    const { silent, live, deployments, p } = await silentPair('silent-fleet');
    // Two workers of 4 slots each under a fleet cap of 4: each alone would give the silent one
    // two, all four of the fleet's; its share of the fleet's is two.
    const options = {
      concurrency: 4,
      maxInFlight: 4,
      deployments,
      firstByteTimeoutMs: 120_000,
      limiter,
    };
    await Promise.all([p.worker(options), p.worker(options)]);
    await enqueue(p, 12);
    await until(async () => (await p.counts()).completed === 10, 30_000);

    expect(silent.stats().attempts).toBe(2);
    expect(live.stats().responses['200']).toBeGreaterThanOrEqual(10);
  });

  it('takes every slot when its share says so (slotShare 1): the pool stalls, as before', async () => {
    const { silent, live, p } = await silentPair('silent-all');
    const deployments = [
      onMock(silent, { name: 'silent', preference: 1, slotShare: 1 }),
      onMock(live, { name: 'live', preference: 1 }),
    ];
    await p.worker({ concurrency: 4, deployments, firstByteTimeoutMs: 120_000, limiter });
    await enqueue(p, 8);
    // It has no readings, so it looks the roomiest: it takes all four, the live one none.
    await until(() => silent.stats().attempts === 4, 10_000);
    expect(live.stats().attempts).toBe(0);
  });
});
