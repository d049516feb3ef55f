import { describe, expect, it } from 'vitest';
import { allCompleted, poolsPerTest, request } from './fixtures/worker-harness.ts';

/*
 * A worker nobody gave limits takes them from the provider's headers, per model (issue 31): the
 * first call of a model goes alone until its answer brings the limits, and the next calls are
 * paced by them. Without that, the six calls below go out at once and half draw 429s.
 */

const openTestPool = poolsPerTest();

describe('limits nobody configured', () => {
  it("are read from the provider's headers per model, and pace the calls after the first", async () => {
    const windowMs = 2_000;
    const pool = await openTestPool('readlimits', {
      windowMs,
      limits: { tokens: 4_000 },
      latencyMs: 50,
      outputShare: 0.1,
      roundReadings: 100,
    });
    const worker = await pool.worker({ limiter: { windowMs }, concurrency: 10 });
    // Each about 1,300 tokens: three fit the provider's 4,000 a window.
    const ids = await Promise.all(
      Array.from({ length: 6 }, (_, i) => pool!.producer.enqueue(request(`Call ${i}.`, 1_290))),
    );
    await allCompleted(pool, ids, 30_000);
    const stats = pool.mock.stats();
    expect(stats.rateLimited.tokens).toBe(0);
    expect(stats.attempts).toBe(6);
    // Waiting on its model's limit, with nothing of another model behind, no job was stepped
    // around (moved to active and back to delayed): each was taken once.
    for (const id of ids) expect((await pool.job(id))!.attemptsStarted).toBe(1);
    // The limit was read into the model's scope, and shows there.
    const snap = await worker.limiter.snapshot();
    const model = snap.scopes.find((s) => s.scope === 'model:claude-test-1');
    expect(model?.dimensions.tokens).toMatchObject({ limit: undefined, providerLimit: 4_000 });
  });
});
