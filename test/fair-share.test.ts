import { describe, expect, it } from 'vitest';
import { allCompleted, poolsPerTest, request } from './fixtures/worker-harness.ts';

const openTestPool = poolsPerTest();

/**
 * Tenant a has ten times b's backlog, arriving mixed (ten of a's, one of b's), all at one
 * priority, under a binding token limit. While both have work (until b's fifteenth job of
 * twenty starts), b's share of the tokens is its weight's share.
 */
async function shareOfB(label: string, weights?: Record<string, number>) {
  const pool = await openTestPool(label, { latencyMs: 5 });
  const ids: string[] = [];
  for (let i = 0; i < 20; i++) {
    for (let j = 0; j < 10; j++)
      ids.push(await pool.producer.enqueue(request(`a ${i} ${j}`, 40), { tenant: 'a' }));
    ids.push(await pool.producer.enqueue(request(`b ${i}`, 40), { tenant: 'b' }));
  }
  const worker = await pool.worker({
    // About 25 calls a second: the limit binds.
    limiter: { windowMs: 1_000, headroom: 0, limits: { tokens: 1_500 } },
    concurrency: 4,
    ...(weights ? { fairShare: { weights } } : {}),
  });
  const jobs = await (async () => {
    await allCompleted(pool!, ids, 90_000);
    return Promise.all(ids.map(async (id) => (await pool!.job(id))!));
  })();
  // While both have work: until b's fifteenth job of twenty starts. (Not its last: the gate
  // admits several jobs a round, and the round that takes b's last job fills its other slots
  // with a's, which start at the same moment only because b has nothing left.)
  const startsOfB = jobs
    .filter((j) => j.data.tenant === 'b')
    .map((j) => j.processedOn!)
    .sort((x, y) => x - y);
  const cutoff = startsOfB[14]!;
  const tokens = { a: 0, b: 0 };
  for (const j of jobs) {
    if (j.processedOn! > cutoff) continue;
    const u = j.returnvalue.message.usage;
    tokens[j.data.tenant as 'a' | 'b'] += u.input_tokens + u.output_tokens;
  }
  // Jobs of one tenant keep their order.
  for (const t of ['a', 'b']) {
    const mine = jobs.filter((j) => j.data.tenant === t);
    const starts = mine.map((j) => j.processedOn!);
    expect(starts).toEqual([...starts].sort((x, y) => x - y));
  }
  await worker.stop(1_000);
  return tokens.b / (tokens.a + tokens.b);
}

describe('fair share between tenants', () => {
  it('gives tenants of equal weight half the tokens each while both have work', async () => {
    const share = await shareOfB('fair-equal', {});
    expect(share).toBeGreaterThanOrEqual(0.45);
    expect(share).toBeLessThanOrEqual(0.55);
  });

  it('gives a tenant of weight 3 three quarters against weight 1', async () => {
    const share = await shareOfB('fair-weighted', { b: 3 });
    expect(share).toBeGreaterThanOrEqual(0.7);
    expect(share).toBeLessThanOrEqual(0.8);
  });
});
