import { describe, expect, it } from 'vitest';
import { Producer } from '../producer/producer.ts';
import { resolveConfig } from '../shared/config.ts';
import { globalLimits, scopeLimitsOf } from '../shared/config-views.ts';
import { RequestValidationError } from '../shared/errors.ts';
import { modelScopeOf } from '../shared/models.ts';
import { allCompleted, poolsPerTest, request } from './fixtures/worker-harness.ts';

const openTestPool = poolsPerTest();

describe('model patterns', () => {
  it("take the exact name first, then the longest prefix; none matches → the model's own scope, or refused when strict", () => {
    const patterns = ['claude-sonnet-*', 'claude-sonnet-4-5*', 'claude-haiku-4-5'];
    expect(modelScopeOf(patterns, 'claude-sonnet-4-5-20250929', false)).toBe(
      'model:claude-sonnet-4-5*',
    );
    expect(modelScopeOf(patterns, 'claude-sonnet-4-0', false)).toBe('model:claude-sonnet-*');
    expect(modelScopeOf(patterns, 'claude-haiku-4-5', false)).toBe('model:claude-haiku-4-5');
    // Unlimited but for what the provider's headers say of the model.
    expect(modelScopeOf(patterns, 'claude-haiku-4-5-x', false)).toBe('model:claude-haiku-4-5-x');
    expect(modelScopeOf([], 'claude-test-1', false)).toBe('model:claude-test-1');
    // A name that could not name a scope has none.
    expect(modelScopeOf([], 'a model|with bars', false)).toBeUndefined();
    expect(() => modelScopeOf(patterns, 'claude-opus-4-1', true)).toThrow(
      /model: "claude-opus-4-1" matches no pattern of models .* modelsStrict is on/,
    );
  });
});

describe('two models in one queue with their own limits', () => {
  it('keeps each model inside its own limits at the provider, with zero 429s, while both run', async () => {
    // The provider limits each model class on its own: 3 calls per 2 s of model a, 6 of model b.
    const pool = await openTestPool('models', {
      windowMs: 2_000,
      modelLimits: { 'claude-a-': { requests: 3 }, 'claude-b-': { requests: 6 } },
    });
    const config = resolveConfig({
      env: {},
      file: {
        windowS: 2,
        headroom: 0,
        models: { 'claude-a-*': { rpm: 3 }, 'claude-b-*': { rpm: 6 } },
        modelsStrict: true,
      },
    });
    const producer = new Producer({
      redis: pool.redis,
      names: pool.names,
      limits: globalLimits(config),
      scopes: scopeLimitsOf(config),
      modelsStrict: config.modelsStrict,
    });
    const worker = await pool.worker({
      limiter: {
        windowMs: 2_000,
        headroom: 0,
        limits: globalLimits(config),
        scopes: scopeLimitsOf(config),
      },
      concurrency: 6,
    });
    // Model a's jobs first: a single budget would hold model b's behind them.
    const a: string[] = [];
    const b: string[] = [];
    for (let i = 0; i < 9; i++) a.push(await producer.enqueue(request(`a ${i}`, 20, 'claude-a-1')));
    for (let i = 0; i < 18; i++)
      b.push(await producer.enqueue(request(`b ${i}`, 20, 'claude-b-1')));
    await expect(producer.enqueue(request('c', 20, 'claude-c-1'))).rejects.toThrow(
      RequestValidationError,
    );

    await allCompleted(pool, [...a, ...b], 60_000);
    const stats = pool.mock.stats();
    expect(stats.responses['429'] ?? 0).toBe(0);
    expect(stats.admitted).toBe(27);
    // Both models were busy at once: each finished jobs while the other still had work.
    const done = async (ids: string[]) =>
      (await Promise.all(ids.map(async (id) => (await pool!.job(id))!.finishedOn!))).sort(
        (x, y) => x - y,
      );
    const [aDone, bDone] = [await done(a), await done(b)];
    expect(bDone[0]!).toBeLessThan(aDone.at(-1)!);
    expect(aDone[0]!).toBeLessThan(bDone.at(-1)!);
    await worker.stop(1_000);
    await producer.close();
  });
});
