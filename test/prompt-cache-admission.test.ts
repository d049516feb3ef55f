import { describe, expect, it } from 'vitest';
import { estimateInputTokens } from '../shared/estimate.ts';
import { allCompleted, poolsPerTest } from './fixtures/worker-harness.ts';

/*
 * Prompt caching at admission (issue 31): cache reads do not count toward the input limit, so a
 * job whose cached prefix is readable reserves only the rest of its input; of jobs sharing a
 * prefix nobody wrote, one writes it and the others follow once it can be read.
 */

const openTestPool = poolsPerTest();

const WORDS = 'alpha beta gamma delta epsilon zeta eta theta iota kappa lambda'.split(' ');
/** About `tokens` tokens of instructions, the same for every job. */
const instructions = (tokens: number) =>
  Array.from({ length: tokens }, (_, i) => WORDS[i % WORDS.length]).join(' ');

const cached = (system: string, i: number) => ({
  model: 'claude-sonnet-4-5',
  max_tokens: 20,
  system: [{ type: 'text', text: system, cache_control: { type: 'ephemeral' } }],
  messages: [{ role: 'user', content: `Question ${i}: ${instructions(150)}` }],
});

describe('a cached prefix shared by many jobs', () => {
  it('is written once; the others reserve only their uncached part, and the window holds', async () => {
    const windowMs = 2_000;
    const limit = 8_000;
    const pool = await openTestPool('promptcache', {
      windowMs,
      limits: { inputTokens: limit },
      latencyMs: 50,
      outputShare: 0.5,
    });
    const worker = await pool.worker({
      limiter: { windowMs, limits: { inputTokens: limit } },
      concurrency: 10,
    });
    const system = instructions(3_000);
    // Ten jobs, each about 3,200 input tokens: 32,000 in all, four windows without the cache.
    const ids = await Promise.all(
      Array.from({ length: 10 }, (_, i) => pool!.producer.enqueue(cached(system, i) as never)),
    );
    await allCompleted(pool, ids, 60_000);
    const stats = pool.mock.stats();
    expect(stats.cache.writes).toBe(1);
    expect(stats.cache.reads).toBe(9);
    expect(stats.rateLimited.input_tokens).toBe(0);
    expect(stats.worstWindow.input_tokens).toBeLessThanOrEqual(limit);
    // What was reserved: the writer's whole input, then the nine readers' questions only.
    const whole = estimateInputTokens(cached(system, 0) as never);
    const question = estimateInputTokens({ ...cached(system, 0), system: undefined } as never);
    const { reservedIn } = (await worker.limiter.snapshot()).counters;
    expect(reservedIn).toBeGreaterThanOrEqual(whole);
    expect(reservedIn).toBeLessThanOrEqual(whole + 9 * question);
  });
});
