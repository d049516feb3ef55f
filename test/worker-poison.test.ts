import { describe, expect, it } from 'vitest';
import { JOB_NAME } from '../shared/job.ts';
import { HeadPeeker } from '../worker/bullmq-internals.ts';
import { allCompleted, poolsPerTest, request } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

/*
 * A job that fails fails alone (issue 35): a job added by other means than llmq's producer, with
 * data that is no llmq job's, is dead-lettered at once with what is wrong, and the jobs behind it
 * run; a job of a newer format is left for a worker that reads it. What the gate schedules by
 * (tenant, priority, cost) is read from the job's options, never from the request's JSON.
 */

const openTestPool = poolsPerTest();

const good = () => request('Say hello.', 20);

describe('a job that cannot be read', () => {
  it('is dead-lettered at once with the reason, and the jobs behind it all complete', async () => {
    const pool = await openTestPool('poison');
    const warnings: string[] = [];
    await pool.worker({
      limiter: { windowMs: 10_000, limits: { tokens: 100_000 } },
      logger: { info() {}, warn: (m, f) => warnings.push(`${m} ${JSON.stringify(f)}`) },
    });
    // Added with BullMQ directly, ahead of the good jobs (priority 1): an empty job, a request
    // without a cost, one without a model, and a job whose options claim a ticket its data lacks.
    const bad = [
      { id: 'empty', data: {} },
      { id: 'no-cost', data: { v: 1, request: good(), priority: 1, enqueuedAt: 1 } },
      {
        id: 'no-model',
        data: {
          v: 1,
          request: { max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] },
          cost: { requests: 1, inputTokens: 10, outputTokens: 20 },
          priority: 1,
          enqueuedAt: 1,
        },
      },
      { id: 'forged', data: {}, llmq: { v: 2, c: [1, 10, 20], m: 'claude-test-1' } },
    ];
    for (const b of bad) {
      await pool.queue.add(
        JOB_NAME,
        b.data as never,
        {
          jobId: b.id,
          priority: 1,
          ...(b.llmq ? { llmq: b.llmq } : {}),
        } as never,
      );
    }
    const ids = await Promise.all([1, 2, 3].map(() => pool!.producer.enqueue(good())));
    await allCompleted(pool, ids, 20_000);
    await until(async () => (await pool!.deadLetters()).length === bad.length, 10_000);
    const letters = await pool.deadLetters();
    expect(letters.map((l) => l.jobId).sort()).toEqual(bad.map((b) => b.id).sort());
    for (const l of letters) {
      expect(l.errorClass).toBe('InvalidJobError');
      expect(l.reason).toMatch(/^the job cannot be read: its (data|ticket) is not an llmq job/);
    }
    expect(letters.find((l) => l.jobId === 'no-model')!.reason).toMatch(/request\.model/);
    expect(letters.find((l) => l.jobId === 'no-cost')!.reason).toMatch(/cost/);
    // None stalled the gate: no "gate failed" lines.
    expect(warnings.filter((w) => w.startsWith('gate failed'))).toEqual([]);
    // Nothing was sent for them.
    expect(pool.mock.stats().attempts).toBe(3);
  });

  it('leaves a job of a newer format for a worker that reads it, and says so', async () => {
    const pool = await openTestPool('poisonnew');
    const warnings: string[] = [];
    await pool.worker({
      limiter: { windowMs: 10_000, limits: { tokens: 100_000 } },
      logger: { info() {}, warn: (m, f) => warnings.push(`${m} ${JSON.stringify(f)}`) },
    });
    const data = {
      v: 1,
      request: good(),
      cost: { requests: 1, inputTokens: 10, outputTokens: 20 },
    };
    await pool.queue.add(
      JOB_NAME,
      { ...data, priority: 1 } as never,
      {
        jobId: 'from-the-future',
        priority: 1,
        llmq: { v: 99, c: [1, 10, 20], m: 'claude-test-1' },
      } as never,
    );
    const ids = await Promise.all([1, 2].map(() => pool!.producer.enqueue(good())));
    await allCompleted(pool, ids, 20_000);
    await until(
      async () => (await pool!.queue.getJobState('from-the-future')) === 'delayed',
      5_000,
    );
    expect(warnings.some((w) => w.includes('newer llmq') && w.includes('job format 99'))).toBe(
      true,
    );
    expect(await pool.deadLetters()).toEqual([]);
    expect(pool.mock.stats().attempts).toBe(2);
  });
});

describe("what the gate schedules by is the job's, not the request's", () => {
  it("a tenant's request metadata cannot pass it for another tenant or another priority", async () => {
    const pool = await openTestPool('poisonfair');
    const meta = { metadata: { priority: 1, tenant: 'tenB', user_id: '"tenant":"tenB"' } };
    for (let i = 0; i < 3; i++)
      await pool.producer.enqueue({ ...good(), ...meta }, { tenant: 'tenA', priority: 'batch' });
    for (let i = 0; i < 3; i++)
      await pool.producer.enqueue(good(), { tenant: 'tenB', priority: 'batch' });
    // Fair share's peek: the first job of each tenant among the head of the queue.
    const heads = await new HeadPeeker(pool.redis, pool.names).peekMany(100, 1);
    expect(heads.map((h) => [h.tenant, h.priority])).toEqual([
      ['tenA', 1_000],
      ['tenB', 1_000],
    ]);
  });
});
