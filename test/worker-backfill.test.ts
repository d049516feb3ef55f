import { afterEach, describe, expect, it } from 'vitest';
import { allCompleted, openPool, type Pool, request } from './fixtures/worker-harness.ts';

let pool: Pool | undefined;
afterEach(async () => {
  await pool?.cleanup();
  pool = undefined;
});

const WINDOW_MS = 2_000;

/**
 * A 600-token job fills most of a 1,000-token window; a 700-token job behind it must wait for
 * that one to leave; three small ones come last. Resolves with each job's start, ms after the
 * first job's.
 */
async function run(backfill: boolean) {
  pool = await openPool(`backfill${backfill ? 'on' : 'off'}`, {
    windowMs: WINDOW_MS,
    limits: { tokens: 1_000 },
    latencyMs: 30,
  });
  const first = await pool.producer.enqueue(request('The first one.', 590), { priority: 'batch' });
  const big = await pool.producer.enqueue(request('The big one.', 690), { priority: 'batch' });
  const small: string[] = [];
  for (let i = 0; i < 3; i++)
    small.push(await pool.producer.enqueue(request(`Small ${i}.`, 60), { priority: 'batch' }));
  await pool.worker({
    concurrency: 5,
    limiter: { windowMs: WINDOW_MS, limits: { tokens: 1_000 } },
    backfill,
  });
  await allCompleted(pool, [first, big, ...small], 20_000);
  const startOf = async (id: string) => (await pool!.job(id))!.processedOn!;
  const t0 = await startOf(first);
  const stats = pool.mock.stats();
  return {
    big: (await startOf(big)) - t0,
    small: await Promise.all(small.map(async (id) => (await startOf(id)) - t0)),
    rateLimited: stats.rateLimited.tokens,
    worst: stats.worstWindow.tokens,
  };
}

describe('backfill', () => {
  it('starts small jobs ahead of a large head that waits for budget, and the head no later', async () => {
    const on = await run(true);
    // The head waits for the first job to leave the window (2 s); the small ones do not wait.
    expect(on.big).toBeGreaterThanOrEqual(WINDOW_MS);
    // No later than the first job's window allows, with room for a loaded machine's delays.
    expect(on.big).toBeLessThan(2 * WINDOW_MS);
    for (const s of on.small) expect(s).toBeLessThan(500);
    expect(on.rateLimited).toBe(0);
    expect(on.worst).toBeLessThanOrEqual(1_000);
  });

  it('is off by default: first come, first served', async () => {
    const off = await run(false);
    expect(off.big).toBeGreaterThanOrEqual(WINDOW_MS);
    for (const s of off.small) expect(s).toBeGreaterThanOrEqual(off.big);
    expect(off.rateLimited).toBe(0);
  });
});
