/**
 * A prompt cache lives in one deployment: jobs sharing a cached prefix go to the deployment that
 * wrote it, before preference; a job sent to another is reserved at its whole input there (that
 * one reads nothing from the cache), and the prefix is then readable there.
 */
import { describe, expect, it } from 'vitest';
import { estimateInputTokens } from '../shared/estimate.ts';
import type { WorkerHandle } from '../worker/worker.ts';
import { eachTestMocks } from './fixtures/mock-servers.ts';
import { onMock } from './fixtures/pool-mocks.ts';
import { allCompleted, type Pool, poolsPerTest } from './fixtures/worker-harness.ts';

const openTestPool = poolsPerTest();
const startMock = eachTestMocks();

const WORDS = 'alpha beta gamma delta epsilon zeta eta theta iota kappa lambda'.split(' ');
const words = (n: number) => Array.from({ length: n }, (_, i) => WORDS[i % WORDS.length]).join(' ');
/** 3,000 words of instructions every job shares, marked for the cache. */
const SYSTEM = words(3_000);
const cached = (i: number) =>
  ({
    model: 'claude-sonnet-4-5',
    max_tokens: 20,
    system: [{ type: 'text', text: SYSTEM, cache_control: { type: 'ephemeral' } }],
    messages: [{ role: 'user', content: `Question ${i}: ${words(100)}` }],
  }) as never;
const WHOLE = estimateInputTokens(cached(0));

/*
 * What a job reserves: WHOLE (some 6,000 tokens, as estimated) in full, some 200 when its prefix
 * is read; the bounds leave room for the learned scaling of estimates.
 */
/** Runs one job to its end: where it went and the input tokens its admission reserved. */
async function runOne(
  p: Pool,
  w: WorkerHandle,
  i: number,
  pin?: string,
): Promise<{ where: string | undefined; reservedIn: number }> {
  const before = (await w.limiter.snapshot()).counters.reservedIn;
  const id = await p.producer.enqueue(cached(i), pin ? { deployment: pin } : {});
  await allCompleted(p, [id], 30_000);
  const after = (await w.limiter.snapshot()).counters.reservedIn;
  return { where: (await p.job(id))!.returnvalue.deployment, reservedIn: after - before };
}

describe('a cached prefix in a pool', () => {
  it('sends the jobs sharing it to the deployment that wrote it, before preference', async () => {
    const [ma, mb] = await Promise.all([startMock(), startMock()]);
    const pool = await openTestPool('poolcache');
    const a = onMock(ma, { name: 'a', preference: 0 });
    // Every slot open to b (slotShare 1): with half of them, a third job at once may go to a.
    const b = onMock(mb, { name: 'b', preference: 1, slotShare: 1 });
    const w = await pool.worker({ concurrency: 4, deployments: [a, b], limiter: {} });
    // The writer goes to b (pinned): the prefix is readable there only.
    expect((await runOne(pool, w, 0, 'b')).where).toBe('b');
    const ids = await Promise.all([1, 2, 3, 4].map((i) => pool!.producer.enqueue(cached(i))));
    await allCompleted(pool, ids, 30_000);
    const where = await Promise.all(
      ids.map(async (id) => (await pool!.job(id))!.returnvalue.deployment),
    );
    expect(where).toEqual(['b', 'b', 'b', 'b']);
    expect(mb.stats().cache).toMatchObject({ writes: 1, reads: 4 });
    expect(ma.stats().attempts).toBe(0);
  });

  it('reserves the whole prompt on another deployment, where it reads nothing; then reads it there', async () => {
    const [ma, mb] = await Promise.all([startMock(), startMock()]);
    const pool = await openTestPool('poolcache-full');
    const a = onMock(ma, { name: 'a' });
    // b takes one request a window: after the writer, none.
    const b = onMock(mb, { name: 'b', limits: { rpm: 1 } });
    const w = await pool.worker({
      concurrency: 2,
      deployments: [a, b],
      limiter: { windowMs: 60_000 },
    });
    const writer = await runOne(pool, w, 0, 'b');
    expect(writer).toMatchObject({ where: 'b' });
    expect(writer.reservedIn).toBeGreaterThan(WHOLE / 2);

    // Readable on b only, and b has no room: on a it is reserved in full, and a writes it.
    const elsewhere = await runOne(pool, w, 1);
    expect(elsewhere.where).toBe('a');
    expect(elsewhere.reservedIn).toBeGreaterThan(WHOLE / 2);
    expect(ma.stats().cache).toMatchObject({ writes: 1, reads: 0 });

    // Now readable on a: the next job reads it there and reserves only its question.
    const reader = await runOne(pool, w, 2);
    expect(reader.where).toBe('a');
    expect(reader.reservedIn).toBeLessThan(WHOLE / 4);
    expect(ma.stats().cache).toMatchObject({ writes: 1, reads: 1 });
    expect(mb.stats().attempts).toBe(1);
  });
});
