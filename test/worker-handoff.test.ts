import { afterEach, describe, expect, it } from 'vitest';
import { type CommandCounts, countRedisCommands } from '../scripts/bench/command-counter.ts';
import { allCompleted, openPool, type Pool, request } from './fixtures/worker-harness.ts';
import { until, watchHighest } from './helpers.ts';

let pool: Pool | undefined;
let counter: { snapshot(): CommandCounts; restore(): void } | undefined;
afterEach(async () => {
  counter?.restore();
  counter = undefined;
  await pool?.cleanup();
  pool = undefined;
});

describe('a finished job hands its slot to the next', () => {
  it('stores the result and takes the next job in one BullMQ command, never before the budget admits it', async () => {
    pool = await openPool('handoff', { latencyMs: 30 });
    const ids: string[] = [];
    for (let i = 0; i < 24; i++) ids.push(await pool.producer.enqueue(request(`Item ${i}.`)));
    counter = await countRedisCommands();
    const worker = await pool.worker({
      concurrency: 3,
      limiter: { windowMs: 5_000, limits: { tokens: 1_000_000 } },
      maxInFlight: 3,
      // However slow the machine, no result gives up on the gate's next reservation here.
      handoffWaitMs: 2_000,
    });
    const inFlight = watchHighest(() => worker.inFlight());
    // BullMQ's own count of active jobs, stored or not, sampled from Redis meanwhile.
    let mostActive = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        mostActive = Math.max(mostActive, (await pool!.counts()).active);
        await new Promise((r) => setTimeout(r, 3));
      }
    })();
    await allCompleted(pool, ids, 20_000);
    sampling = false;
    await sampler;
    const most = inFlight.stop();
    const commands = counter.snapshot().commands;

    // Each job was stored once; only the first few were fetched on their own (moveToActive):
    // the rest came with the completion of the job before them.
    expect(commands['evalsha:bullmq:moveToFinished']).toBe(24);
    expect(commands['evalsha:bullmq:moveToActive'] ?? 0).toBeLessThanOrEqual(6);
    // Every job had its reservation first, and the pool kept to its concurrency.
    const snap = await worker.limiter.snapshot();
    expect(snap.counters.admitted).toBe(24);
    expect(most).toBeLessThanOrEqual(3);
    expect(mostActive).toBeGreaterThan(0);
    expect(mostActive).toBeLessThanOrEqual(3);
    expect(pool.mock.stats().attempts).toBe(24);
    for (const id of ids) expect((await pool.job(id))!.attemptsStarted).toBe(1);
  });

  it('alone on a queue, fetches every job with the reservation made for it, however fast the rounds', async () => {
    // Calls of a few ms: each gate round follows the last closely, and its peek is sent ahead,
    // behind the last round's fetches. Sent before them, it would see the jobs they take, and
    // every job would come in place of another (a reservation adjusted, or given back).
    pool = await openPool('handoffahead', { latencyMs: 0 });
    const ids = await pool.producer.enqueueMany(
      Array.from({ length: 120 }, (_, i) => request(`Item ${i}.`, 20)),
    );
    counter = await countRedisCommands();
    const worker = await pool.worker({
      concurrency: 5,
      limiter: { windowMs: 60_000, limits: { tokens: 10_000_000 } },
      maxInFlight: 5,
    });
    await allCompleted(pool, ids, 30_000);
    const commands = counter.snapshot().commands;
    expect(commands['evalsha:bullmq:moveToFinished']).toBe(120);
    expect(commands['evalsha:llmq:adjust'] ?? 0).toBe(0);
    const snap = await worker.limiter.snapshot();
    expect(snap.counters.admitted).toBe(120);
    expect(snap.counters.released).toBe(0);
  });

  it('does not keep a result waiting while the pool waits for budget', async () => {
    // One job's worth of tokens a 30 s window: the second job waits that long for budget.
    pool = await openPool('handoffwait', { latencyMs: 20 });
    const first = await pool.producer.enqueue(request('First.', 300));
    const second = await pool.producer.enqueue(request('Second.', 300));
    await pool.worker({
      concurrency: 2,
      limiter: { windowMs: 30_000, limits: { tokens: 500 } },
      // Longer than the wait for budget: only the gate letting go of it when denied stores it.
      handoffWaitMs: 60_000,
    });
    // The first result is stored as soon as its call ended, while the second still waits: a
    // result kept for the next job would be stored only when that one starts, 30 s later.
    await until(async () => (await pool!.queue.getJobState(first)) === 'completed', 20_000);
    expect((await pool.job(second))!.processedOn).toBeUndefined();
    expect(await pool.queue.getJobState(second)).toMatch(/^(waiting|prioritized)$/);
  });

  it("reads the provider's headers before its own refund: a worker alone on a key sees no other client", async () => {
    // Unused output comes back at settle; the headers, taken at admission, still count it. Read
    // after the settle, they would look like another client's spend.
    const limiter = { windowMs: 60_000, outputAccounting: 'actual' as const };
    pool = await openPool('handoffobserve', {
      ...limiter,
      outputShare: 0.1,
      latencyMs: 0,
      limits: { outputTokens: 1_000_000 },
    });
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) ids.push(await pool.producer.enqueue(request(`Item ${i}.`, 1000)));
    // Not streamed: the body arrives with the headers, so the settle is ready at once.
    const worker = await pool.worker({
      concurrency: 1,
      stream: 'auto',
      limiter: { ...limiter, limits: { outputTokens: 1_000_000 } },
    });
    await allCompleted(pool, ids, 20_000);
    const snap = await worker.limiter.snapshot();
    // The readings describe the model's limits: they land in its scope.
    const model = snap.scopes.find((s) => s.scope === 'model:claude-test-1')!;
    const output = model.dimensions.outputTokens!;
    // The provider's view holds nothing beyond our own spend but its rounding (learned from its
    // figures): no phantom other client.
    expect(output.providerLimit).toBe(1_000_000);
    const beyondOurs = output.providerLimit! - output.used - output.providerRoom!;
    expect(beyondOurs).toBeLessThanOrEqual(model.roundingStep / 2);
    expect(pool.mock.stats().attempts).toBe(6);
  });
});
