import { describe, expect, it } from 'vitest';
import { EstimateLearning } from '../shared/estimate-learning.ts';
import { JOB_NAME } from '../shared/job.ts';
import { countMockTokens } from '../testing/mock-anthropic/index.ts';
import { allCompleted, poolsPerTest, request, settledInputs } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const openTestPool = poolsPerTest();

// The provider counts input unlike llmq's estimate: characters / 3.6 + 7 a message.
const DIFFERING = { charsPerToken: 3.6, perMessageTokens: 7 };
const texts = (n: number, from: number) =>
  Array.from({ length: n }, (_, i) =>
    request(`${'lorem ipsum dolor sit amet '.repeat(1 + ((from + i) % 23))}#${from + i}`, 60),
  );

describe('estimates that learn', () => {
  it('reserves what the provider counts after 50 calls (accuracy ≥ 90%), with zero 429s', async () => {
    const pool = await openTestPool('learn', {
      latencyMs: 5,
      ...DIFFERING,
      windowMs: 60_000,
      limits: { inputTokens: 40_000 },
    });
    const worker = await pool.worker({
      concurrency: 4,
      limiter: { limits: { inputTokens: 40_000 }, windowMs: 60_000 },
    });
    const first = await pool.producer.enqueueMany(texts(50, 0));
    await allCompleted(pool, first, 30_000);
    await until(async () => (await settledInputs(worker)).settled === 50, 5_000);
    const before = await settledInputs(worker);

    const next = await pool.producer.enqueueMany(texts(30, 50));
    await allCompleted(pool, next, 30_000);
    await until(async () => (await settledInputs(worker)).settled === 80, 5_000);
    const after = await settledInputs(worker);
    const accuracy =
      (after.actualIn - before.actualIn) / (after.settledReservedIn - before.settledReservedIn);
    expect(accuracy).toBeGreaterThanOrEqual(0.9);
    expect(accuracy).toBeLessThanOrEqual(1);
    expect(pool.mock.stats().responses['429'] ?? 0).toBe(0);
    const learned = await new EstimateLearning({ redis: pool.redis, names: pool.names }).learned(
      'claude-test-1',
    );
    expect(learned.observations).toBe(80);
  });

  it('reserves a count from count_tokens as is and learns nothing from it', async () => {
    const pool = await openTestPool('learncount', { latencyMs: 5, ...DIFFERING });
    const learning = new EstimateLearning({ redis: pool.redis, names: pool.names });
    const req = texts(1, 3)[0]!;
    const estimate = pool.producer.prepare(req).cost.inputTokens;
    // Learned before, of estimates like this one: the provider counts half of them.
    for (let i = 0; i < 25; i++) await learning.record('claude-test-1', estimate, estimate >> 1);
    const ratio = await learning.ratio('claude-test-1', estimate);
    expect(ratio).toBeLessThan(0.6);
    const worker = await pool.worker({ limiter: { limits: { inputTokens: 40_000 } } });
    await allCompleted(pool, [await pool.producer.enqueue(req)], 15_000);
    await until(async () => (await settledInputs(worker)).settled === 1, 5_000);
    const one = await settledInputs(worker);
    expect(one.settledReservedIn).toBe(Math.ceil(estimate * ratio - 1e-9));
    // A job whose input count_tokens counted: reserved at its count, and not learned from.
    const counted = { ...pool.producer.prepare(req), inputCounted: true as const };
    await pool.queue.add(JOB_NAME, counted, { priority: 100 });
    await until(async () => (await settledInputs(worker)).settled === 2, 15_000);
    const two = await settledInputs(worker);
    expect(two.settledReservedIn - one.settledReservedIn).toBe(estimate);
    expect((await learning.learned('claude-test-1')).observations).toBe(26);
  });

  it('reserves documents at their estimate after learning on short calls, with zero 429s', async () => {
    // A window that 12 documents overfill when reserved at the short calls' ratio (~0.4 of
    // ~200): as the provider counts them (~154 each) they need two windows.
    const windowMs = 2_000;
    const limits = { inputTokens: 1_000 };
    const pool = await openTestPool('learnbands', {
      latencyMs: 200,
      ...DIFFERING,
      windowMs,
      limits,
    });
    const model = 'claude-test-1';
    const learning = new EstimateLearning({ redis: pool.redis, names: pool.names });
    const shorts = Array.from({ length: 30 }, (_, i) => request(`Say hello #${i}`));
    for (const r of shorts)
      await learning.record(
        model,
        pool.producer.prepare(r).cost.inputTokens,
        countMockTokens(r, DIFFERING),
      );
    const short = pool.producer.prepare(shorts[0]!).cost.inputTokens;
    expect(await learning.ratio(model, short)).toBeLessThan(0.5);

    const docs = Array.from({ length: 12 }, (_, i) =>
      request(`${'lorem ipsum dolor sit amet '.repeat(19)}#${i}`, 60),
    );
    const estimate = pool.producer.prepare(docs[0]!).cost.inputTokens;
    expect(estimate).toBeGreaterThan(4 * short);
    // Their band is cold and no warm band lies above it: the estimate as is.
    expect(await learning.reserveFor(model, estimate)).toBe(estimate);

    const worker = await pool.worker({ concurrency: 12, limiter: { limits, windowMs } });
    await allCompleted(pool, await pool.producer.enqueueMany(docs), 30_000);
    await until(async () => (await settledInputs(worker)).settled === 12, 5_000);
    expect(pool.mock.stats().responses['429'] ?? 0).toBe(0);
    const learned = await learning.learned(model);
    expect(learned.bands.find((b) => b.from <= estimate && estimate <= b.to)).toMatchObject({
      observations: 12,
      warm: true,
    });
  });
});
