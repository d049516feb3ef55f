/**
 * The worker never believes the cost a job claims: a job added with BullMQ's own `Queue.add`
 * (no llmq producer) claiming less than its request costs is admitted at what the request costs,
 * its output at its max_tokens, or dead-lettered when even that can never fit.
 */
import { describe, expect, it } from 'vitest';
import { JOB_NAME } from '../shared/job.ts';
import type { JobTicket } from '../shared/job-ticket.ts';
import type { DimensionLimits } from '../shared/limiter/types.ts';
import { showDeadLetter } from '../worker/dead-letters.ts';
import {
  allCompleted,
  type Pool,
  poolsPerTest,
  request,
  settledInputs,
} from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const openTestPool = poolsPerTest();

const MODEL = 'claude-test-1';
const WINDOW_MS = 3_000;

/** `chars` characters the mock counts as llmq estimates them (a token per three bytes). */
const dense = (chars: number) => 'x,'.repeat(Math.ceil(chars / 2)).slice(0, chars);

/**
 * Adds a job with BullMQ directly, at the most urgent priority, claiming `claim` in its ticket
 * (the job's options, what the gate reads) or, with no ticket, in its data (a format-1 job).
 */
async function addForged(
  p: Pool,
  text: string,
  maxTokens: number,
  claim: { inputTokens: number; outputTokens: number },
  where: 'ticket' | 'data' = 'ticket',
): Promise<string> {
  const data = {
    v: 1 as const,
    request: { model: MODEL, max_tokens: maxTokens, messages: [{ role: 'user', content: text }] },
    cost: { requests: 1, ...claim },
    priority: 1,
    enqueuedAt: Date.now(),
  };
  const ticket = { v: 2, c: [1, claim.inputTokens, claim.outputTokens], m: MODEL };
  const opts = { priority: 1, ...(where === 'ticket' ? { llmq: ticket } : {}) };
  const job = await p.queue.add(JOB_NAME, data as never, opts);
  return job.id!;
}

/**
 * Runs `ids` on one worker (4 at once, no headroom): all complete with no 429 from the provider,
 * then all settle (once their answers are stored, soon after). Returns the worker.
 */
async function runToSettled(p: Pool, limits: DimensionLimits, ids: string[]) {
  const worker = await p.worker({
    concurrency: 4,
    limiter: { limits, windowMs: WINDOW_MS, headroom: 0 },
  });
  await allCompleted(p, ids, 30_000);
  expect(p.mock.stats().responses['429'] ?? 0).toBe(0);
  await until(async () => (await settledInputs(worker)).settled === ids.length, 10_000);
  return worker;
}

const ticketOf = async (p: Pool, id: string) =>
  (await p.job(id))?.opts as { llmq?: JobTicket } | undefined;

describe('a claimed cost below what the request implies', () => {
  it.each(['ticket', 'data'] as const)(
    'claiming 10 input tokens (in its %s) for 400,000 characters, it is admitted at their cost: the next job waits, no 429',
    async (where) => {
      const limits = { inputTokens: 200_000 };
      const p = await openTestPool(`forged-${where}`, {
        limits,
        windowMs: WINDOW_MS,
        latencyMs: 300,
      });
      // Both queued before a worker runs: trusting the claim, one round admits them together
      // (10 + 80,000 of 200,000), and the provider counts 213,000.
      const forged = await addForged(
        p,
        dense(400_000),
        16,
        { inputTokens: 10, outputTokens: 16 },
        where,
      );
      const good = await p.producer.enqueue(request(dense(240_000), 16), { priority: 'batch' });
      const worker = await runToSettled(p, limits, [forged, good]);
      const account = await settledInputs(worker);
      // What the limiter held for the calls covered what the provider counted.
      expect(account.settledReservedIn).toBeGreaterThanOrEqual(account.actualIn);
      // The forged job's ticket now says what its request costs, and what it claimed.
      const t = (await ticketOf(p, forged))?.llmq;
      expect(t?.c[1]).toBeGreaterThan(133_000);
      expect(t?.w).toEqual([1, 10, 16]);
      // A producer's job is reserved as it claims: its ticket untouched.
      expect((await ticketOf(p, good))?.llmq?.w).toBeUndefined();
    },
    60_000,
  );

  it('claiming 1 output token with max_tokens 60,000, it reserves 60,000 output tokens', async () => {
    const limits = { outputTokens: 100_000 };
    const p = await openTestPool('forged-out', {
      limits,
      windowMs: WINDOW_MS,
      latencyMs: 300,
      outputShare: 0.01,
    });
    const forged = await addForged(p, 'Say hello.', 60_000, { inputTokens: 30, outputTokens: 1 });
    const good = await p.producer.enqueue(request('Say hi.', 60_000), { priority: 'batch' });
    const worker = await runToSettled(p, limits, [forged, good]);
    const { counters } = await worker.limiter.snapshot();
    expect(counters.settledReservedOut).toBe(120_000);
    expect((await ticketOf(p, forged))?.llmq?.c[2]).toBe(60_000);
  }, 60_000);

  it('a request that can never fit the limit is dead-lettered with why, never sent', async () => {
    const limits = { inputTokens: 100_000 };
    const p = await openTestPool('forged-never', { limits, windowMs: WINDOW_MS });
    const forged = await addForged(p, dense(400_000), 16, { inputTokens: 10, outputTokens: 16 });
    await p.worker({ limiter: { limits, windowMs: WINDOW_MS, headroom: 0 } });
    await until(async () => (await p.deadLetters()).length === 1, 20_000);
    const [dead] = await p.deadLetters();
    expect(dead).toMatchObject({ jobId: forged, errorClass: 'CostExceedsLimitError' });
    expect(dead!.reason).toMatch(/needs 133,?\d{3} inputTokens/);
    expect(dead!.reason).toContain('it claimed 10 input and 16 output tokens');
    // Its letter is found by the job's id, though BullMQ numbered it.
    expect((await showDeadLetter(p.dlq, forged))?.jobId).toBe(forged);
    // The worker goes on: a job that fits runs.
    const good = await p.producer.enqueue(request('Say hi.', 16));
    await allCompleted(p, [good], 20_000);
    expect(p.mock.stats().attempts).toBe(1);
  }, 60_000);

  it('a request that cannot be costed is dead-lettered at once; the job behind it runs', async () => {
    const p = await openTestPool('forged-shape');
    const data = {
      v: 1,
      request: { model: MODEL, max_tokens: 16, messages: [null] },
      cost: { requests: 1, inputTokens: 10, outputTokens: 16 },
      priority: 1,
      enqueuedAt: Date.now(),
    };
    const odd = (await p.queue.add(JOB_NAME, data as never, { priority: 1 })).id!;
    const good = await p.producer.enqueue(request('Say hi.', 16));
    await p.worker({ limiter: { limits: { inputTokens: 100_000 }, windowMs: WINDOW_MS } });
    await allCompleted(p, [good], 20_000);
    await until(async () => (await p.deadLetters()).length === 1, 10_000);
    const [dead] = await p.deadLetters();
    expect(dead).toMatchObject({ jobId: odd, errorClass: 'InvalidJobError' });
    expect(dead!.reason).toContain('its request cannot be costed');
    expect(p.mock.stats().attempts).toBe(1);
  }, 60_000);
});
