import { describe, expect, it } from 'vitest';
import { Producer } from '../producer/producer.ts';
import { deploymentScope } from '../shared/deployments.ts';
import { RequestValidationError } from '../shared/errors.ts';
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

/** Enqueues `n` short jobs; their ids. */
async function enqueue(p: Pool, n: number, options: { deployment?: string; model?: string } = {}) {
  const ids: string[] = [];
  for (let i = 0; i < n; i++)
    ids.push(
      await p.producer.enqueue(request(`Job ${i}: say hi.`, 200, options.model), {
        ...(options.deployment ? { deployment: options.deployment } : {}),
      }),
    );
  return ids;
}

/** Where each job went, as its result says. */
async function whereDone(p: Pool, ids: readonly string[]): Promise<string[]> {
  return Promise.all(ids.map(async (id) => (await p.job(id))!.returnvalue.deployment ?? '-'));
}

describe('a pool of deployments', () => {
  it('spreads jobs over two deployments by their room: no 429, each job completes once, no key in job data', async () => {
    const windowMs = 2_000;
    const [ma, mb] = await Promise.all([
      startMock({ windowMs, limits: { tokens: 1_500 }, latencyMs: 20 }),
      startMock({ windowMs, limits: { tokens: 3_000 }, latencyMs: 20 }),
    ]);
    const pool = await openTestPool('pool2');
    const a = onMock(ma, { name: 'a', limits: { tpm: 1_500 } });
    const b = onMock(mb, { name: 'b', limits: { tpm: 3_000 } });
    await pool.worker({ concurrency: 8, deployments: [a, b], limiter: { windowMs } });
    const ids = await enqueue(pool, 16);
    await allCompleted(pool, ids, 30_000);

    const where = await whereDone(pool, ids);
    expect(new Set(where)).toEqual(new Set(['a', 'b']));
    // Each mock answered exactly the jobs recorded as its own, none with a 429.
    expect(ma.stats().responses).toEqual({ '200': where.filter((w) => w === 'a').length });
    expect(mb.stats().responses).toEqual({ '200': where.filter((w) => w === 'b').length });
    const events = await completedEvents(pool);
    for (const id of ids) expect(events.get(id)).toBe(1);
    for (const id of ids) {
      const job = (await pool.job(id))!;
      const stored = JSON.stringify([job.data, job.returnvalue, job.opts]);
      expect(stored).not.toContain(a.key);
      expect(stored).not.toContain(b.key);
    }
    expect(await pool.deadLetters()).toEqual([]);
  });

  it('sends a job for a model only one of three deployments serves there, under its platform id', async () => {
    const [ma, mb, mc] = await Promise.all([startMock(), startMock(), startMock()]);
    const pool = await openTestPool('pool3');
    const test = { 'claude-test-*': 'claude-test-1' };
    const a = onMock(ma, { name: 'a', models: test });
    const b = onMock(mb, { name: 'b', models: test, preference: 5 });
    const c = onMock(mc, {
      name: 'c',
      models: { 'claude-rare-1': 'claude-rare-on-c@2026' },
      preference: 9,
    });
    await pool.worker({ concurrency: 4, deployments: [a, b, c], limiter: {} });
    const rare = await enqueue(pool, 3, { model: 'claude-rare-1' });
    const common = await enqueue(pool, 3);
    await allCompleted(pool, [...rare, ...common], 30_000);

    expect(await whereDone(pool, rare)).toEqual(['c', 'c', 'c']);
    // The others go to the preferred one that serves them (it has room: no limits).
    expect(await whereDone(pool, common)).toEqual(['a', 'a', 'a']);
    for (const id of rare)
      expect((await pool.job(id))!.returnvalue.message.model).toBe('claude-rare-on-c@2026');
    expect(mb.stats().attempts).toBe(0);
    expect(mc.stats().attempts).toBe(3);
  });

  it('sends a job too big for the preferred deployment to one whose limits fit it', async () => {
    const [ma, mb] = await Promise.all([startMock(), startMock()]);
    const pool = await openTestPool('pool-big');
    const a = onMock(ma, { name: 'a', limits: { tpm: 400 } });
    const b = onMock(mb, { name: 'b', limits: { tpm: 100_000 } });
    await pool.worker({ concurrency: 2, deployments: [a, b], limiter: {} });
    const small = await pool.producer.enqueue(request('Hi.', 100));
    const big = await pool.producer.enqueue(request('Hi.', 2_000));
    await allCompleted(pool, [small, big], 30_000);
    expect(await whereDone(pool, [small, big])).toEqual(['a', 'b']);
    expect(await pool.deadLetters()).toEqual([]);
  });

  it('sends a pinned job to its deployment; a pin the pool lacks is refused or dead-lettered with why', async () => {
    const [ma, mb] = await Promise.all([startMock(), startMock()]);
    const pool = await openTestPool('pin');
    const a = onMock(ma, { name: 'a' });
    const b = onMock(mb, { name: 'b' });
    await pool.worker({ concurrency: 4, deployments: [a, b], limiter: {} });
    const pinned = await enqueue(pool, 2, { deployment: 'b' });
    const free = await enqueue(pool, 2);
    // This producer does not know the pool: the worker dead-letters the job.
    const [lost] = await enqueue(pool, 1, { deployment: 'nowhere' });
    await allCompleted(pool, [...pinned, ...free], 30_000);
    expect(await whereDone(pool, pinned)).toEqual(['b', 'b']);
    expect(await whereDone(pool, free)).toEqual(['a', 'a']);
    await until(async () => (await pool!.deadLetters()).length === 1, 10_000);
    const [letter] = await pool.deadLetters();
    expect(letter).toMatchObject({ jobId: lost, errorClass: 'DeploymentNotFoundError' });
    expect(letter!.reason).toContain('"nowhere"');
    expect(letter!.reason).toContain('a, b');

    // A producer that knows the pool refuses the pin at once, naming the field and the pool.
    const knowing = new Producer({ redis: pool.redis, names: pool.names, deployments: ['a', 'b'] });
    try {
      const refused = knowing.enqueue(request('Hi.'), { deployment: 'nowhere' });
      await expect(refused).rejects.toThrow(RequestValidationError);
      await expect(refused).rejects.toThrow(/deployment.*"nowhere".*a, b/);
    } finally {
      await knowing.close();
    }
  });

  it('a 429 with retry-after on one deployment pauses only it: the other keeps admitting', async () => {
    // Deployment a's key allows 2 requests per 10 s, but is configured (wrongly) for far more,
    // so a burst there meets 429s with retry-after of several seconds.
    const [ma, mb] = await Promise.all([
      startMock({ windowMs: 10_000, limits: { requests: 2 }, latencyMs: 50 }),
      startMock({ latencyMs: 20 }),
    ]);
    const pool = await openTestPool('pool429');
    const a = onMock(ma, { name: 'a', limits: { rpm: 100 } });
    const b = onMock(mb, { name: 'b' });
    // Enqueued first, and with a global limit (the model's first call need not go alone): the
    // first round sends them all to a at once.
    const ids = await enqueue(pool, 8);
    const lines: string[] = [];
    const log = (message: string, fields?: Record<string, unknown>) => {
      lines.push(JSON.stringify({ message, ...fields }));
    };
    const w = await pool.worker({
      concurrency: 8,
      deployments: [a, b],
      limiter: { windowMs: 10_000, limits: { tokens: 1_000_000 } },
      logger: { info: log, warn: log },
    });
    await allCompleted(pool, ids, 30_000);

    expect(ma.stats().responses['429']).toBeGreaterThan(0);
    const pausedA = await w.limiter.pausedUntil([deploymentScope('a')]);
    expect(pausedA).toBeGreaterThan(0);
    // Neither the queue nor the other deployment was paused.
    expect(await w.limiter.pausedUntil()).toBe(0);
    expect(await w.limiter.pausedUntil([deploymentScope('b')])).toBe(0);
    // The jobs a rate-limited went to b and completed there before a's pause ended.
    let moved = 0;
    for (const id of ids) {
      const job = (await pool.job(id))!;
      const limited = (job.data.history ?? []).filter((h) => h.outcome === 'rate_limited');
      for (const h of limited) expect(h.deployment).toBe('a');
      if (limited.length === 0) continue;
      moved++;
      expect(job.returnvalue.deployment).toBe('b');
      expect(job.returnvalue.completedAt).toBeLessThan(pausedA);
      expect(job.returnvalue.attempts).toBe(1);
    }
    expect(moved).toBeGreaterThan(0);
    expect(await pool.deadLetters()).toEqual([]);
    // The log says which deployment paused, and shows no key.
    expect(
      lines.some((l) => l.includes('the deployment pauses') && l.includes('"deployment":"a"')),
    ).toBe(true);
    for (const l of lines) {
      expect(l).not.toContain(a.key);
      expect(l).not.toContain(b.key);
    }
  });

  it('a deployment answering 529s opens its own breaker; the pool carries on and every job completes once', async () => {
    const [ma, mb] = await Promise.all([
      startMock({ faults: { overloaded: 1 }, latencyMs: 5 }),
      startMock({ latencyMs: 20 }),
    ]);
    const pool = await openTestPool('pool529');
    const a = onMock(ma, { name: 'a' });
    const b = onMock(mb, { name: 'b' });
    await pool.worker({
      concurrency: 4,
      deployments: [a, b],
      breaker: { threshold: 2, cooldownMs: 500 },
      backoff: { baseMs: 20, capMs: 50 },
      limiter: {},
    });
    const ids = await enqueue(pool, 12);
    await allCompleted(pool, ids, 30_000);

    const redis = pool.redis;
    const opened = async (d: string) =>
      Number((await redis.hget(breakerKey(pool!.names, d), 'opened_count')) ?? 0);
    expect(await opened('a')).toBeGreaterThan(0);
    expect(await opened('b')).toBe(0);
    // The queue's own breaker never opened: a's failures are a's alone.
    expect(await redis.hget(breakerKey(pool.names), 'opened_count')).toBeNull();
    expect(await whereDone(pool, ids)).toEqual(ids.map(() => 'b'));
    const events = await completedEvents(pool);
    for (const id of ids) expect(events.get(id)).toBe(1);
    expect(await pool.deadLetters()).toEqual([]);
    expect(ma.stats().responses['529']).toBeGreaterThan(0);

    // a recovers: once its cool-down ends, a job makes its trial call, which succeeds, and its
    // breaker closes.
    ma.setFaults({});
    const state = async () => (await redis.hget(breakerKey(pool!.names, 'a'), 'state')) ?? 'closed';
    await until(async () => {
      await allCompleted(pool!, await enqueue(pool!, 1), 10_000);
      return (await state()) === 'closed';
    }, 20_000);
    expect(ma.stats().responses['200']).toBeGreaterThan(0);
    // It takes jobs again, as the preferred one.
    const later = await enqueue(pool, 4);
    await allCompleted(pool, later, 30_000);
    expect(await whereDone(pool, later)).toContain('a');
  });
});
