import { afterEach, describe, expect, it } from 'vitest';
import { type CommandCounts, countRedisCommands } from '../scripts/bench/command-counter.ts';
import { gatePaths } from '../worker/gate-paths.ts';
import { allCompleted, openPool, type Pool, request } from './fixtures/worker-harness.ts';

let pool: Pool | undefined;
let counter: { snapshot(): CommandCounts; restore(): void } | undefined;
afterEach(async () => {
  counter?.restore();
  counter = undefined;
  delete process.env['LLMQ_GATE_PLAIN'];
  await pool?.cleanup();
  pool = undefined;
});

describe('the plain gate (LLMQ_GATE_PLAIN=1, a bench switch)', () => {
  it('turns off every path beyond the plain ones, or only the early peeks or the fetches along', () => {
    expect(gatePaths({})).toEqual({ earlyPeeks: true, fetchesAlong: true });
    expect(gatePaths({ LLMQ_GATE_PLAIN: '1' })).toEqual({ earlyPeeks: false, fetchesAlong: false });
    expect(gatePaths({ LLMQ_GATE_PLAIN: 'peeks' })).toEqual({
      earlyPeeks: false,
      fetchesAlong: true,
    });
    expect(gatePaths({ LLMQ_GATE_PLAIN: 'fetches' })).toEqual({
      earlyPeeks: true,
      fetchesAlong: false,
    });
  });

  it('fetches every job with a moveToActive of its own, after its admission, and stores each result alone', async () => {
    pool = await openPool('gateplain', { latencyMs: 30 });
    const ids: string[] = [];
    for (let i = 0; i < 24; i++) ids.push(await pool.producer.enqueue(request(`Item ${i}.`)));
    counter = await countRedisCommands();
    // Read once, as the worker is built.
    process.env['LLMQ_GATE_PLAIN'] = '1';
    const worker = await pool.worker({
      concurrency: 3,
      limiter: { windowMs: 5_000, limits: { tokens: 1_000_000 } },
      maxInFlight: 3,
      // Were the handoff on, every result here would wait for the next fetch.
      handoffWaitMs: 2_000,
    });
    await allCompleted(pool, ids, 20_000);
    const commands = counter.snapshot().commands;

    // No job came with the acquire (its cap script) or with a completion.
    expect(commands['evalsha:bullmq:moveToActive']).toBe(24);
    expect(commands['evalsha:llmq:cap'] ?? 0).toBe(0);
    expect(commands['evalsha:bullmq:moveToFinished']).toBe(24);
    const snap = await worker.limiter.snapshot();
    expect(snap.counters.admitted).toBe(24);
    expect(pool.mock.stats().attempts).toBe(24);
  });
});
