import { describe, expect, it } from 'vitest';
import { Limiter } from '../shared/limiter/limiter.ts';
import { listDeadLetters, showDeadLetter } from '../worker/dead-letters.ts';
import { allCompleted, type Pool, poolsPerTest, request } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const openTestPool = poolsPerTest();

async function deadLettered(p: Pool, ids: readonly string[]): Promise<void> {
  await until(async () => {
    const states = await Promise.all(ids.map((id) => p.queue.getJobState(id)));
    return states.every((s) => s === 'failed');
  }, 15_000);
}

describe('final failures go straight to the dead letters', () => {
  it('a spend-capped key: dead-lettered with the spend limit as reason, never retried', async () => {
    const pool = await openTestPool('dlspend', { spendCappedKeys: ['sk-capped'] });
    const id = await pool.producer.enqueue(request('Hello there.'), { attempts: 5 });
    const worker = await pool.worker({
      apiKey: 'sk-capped',
      limiter: { windowMs: 5_000, limits: { tokens: 10_000 } },
    });
    await deadLettered(pool, [id]);

    const [summary, ...rest] = await listDeadLetters(pool.dlq);
    expect(rest).toEqual([]);
    expect(summary).toMatchObject({
      id,
      errorClass: 'EnforcedSpendLimitReachedError',
      status: 429,
      attempts: 1,
      model: 'claude-test-1',
    });
    expect(summary!.reason).toMatch(/^spend limit reached: You have reached your API usage limits/);
    const letter = (await showDeadLetter(pool.dlq, id))!;
    expect(letter.providerType).toBe('rate_limit_error');
    expect(letter.attempts).toEqual([
      expect.objectContaining({ outcome: 'final', counted: true, status: 429 }),
    ]);

    // One call, no retry, no shared pause, and nothing of the budget kept.
    await new Promise((r) => setTimeout(r, 300));
    expect(pool.mock.stats().attempts).toBe(1);
    const snap = await worker.limiter.snapshot();
    expect(snap.pausedUntil).toBeNull();
    expect(snap.inFlight).toBe(0);
    expect(snap.scopes.find((s) => s.scope === 'global')!.dimensions.tokens.used).toBe(0);
    expect((await pool.job(id))!.failedReason).toBe(summary!.reason);
  });

  it('400 and 404: dead-lettered with the provider’s message and error type; list and show tell why', async () => {
    const pool = await openTestPool('dl4xx');
    // llmq's own checks let an empty text block through; the provider refuses it.
    const emptyBlock = {
      model: 'claude-test-1',
      max_tokens: 20,
      messages: [{ role: 'user', content: [{ type: 'text', text: '' }] }],
    };
    const badModel = request('Hello.', 20, 'gpt-4o');
    const id400 = await pool.producer.enqueue(emptyBlock, { attempts: 5 });
    const id404 = await pool.producer.enqueue(badModel, { attempts: 5 });
    await pool.worker({ limiter: { windowMs: 5_000, limits: { tokens: 10_000 } } });
    await deadLettered(pool, [id400, id404]);
    await new Promise((r) => setTimeout(r, 300));
    expect(pool.mock.stats().attempts).toBe(2);

    const list = await listDeadLetters(pool.dlq);
    expect(list.map((l) => l.id).sort()).toEqual([id400, id404].sort());
    const by = new Map(list.map((l) => [l.id, l]));
    expect(by.get(id400)).toMatchObject({
      errorClass: 'BadRequestError',
      status: 400,
      attempts: 1,
    });
    expect(by.get(id400)!.reason).toBe(
      '400 invalid_request_error: messages.0.content.0.text: text content blocks must be non-empty',
    );
    expect(by.get(id404)).toMatchObject({
      errorClass: 'NotFoundError',
      status: 404,
      attempts: 1,
      model: 'gpt-4o',
    });
    expect(by.get(id404)!.reason).toBe('404 not_found_error: model: gpt-4o');

    const letter = (await showDeadLetter(pool.dlq, id400))!;
    expect(letter).toMatchObject({
      jobId: id400,
      queue: pool.names.queue,
      errorClass: 'BadRequestError',
      status: 400,
      providerType: 'invalid_request_error',
      providerMessage: 'messages.0.content.0.text: text content blocks must be non-empty',
    });
    expect(letter.data.request).toEqual(emptyBlock);
    expect(letter.attempts).toEqual([
      expect.objectContaining({
        outcome: 'final',
        counted: true,
        status: 400,
        errorClass: 'BadRequestError',
      }),
    ]);
    expect(await showDeadLetter(pool.dlq, 'no-such-id')).toBeUndefined();
  });

  it('a 429 without retry-after: dead-lettered at once, no shared pause', async () => {
    // The provider allows 500 tokens per 5 s; a proxy strips retry-after and the rate-limit
    // headers, so the second call meets a 429 the worker cannot plan around.
    const pool = await openTestPool('dl429', { windowMs: 5_000, limits: { tokens: 500 } });
    const proxy = await pool.recordingProxy({
      dropHeaders: [
        'retry-after',
        ...['limit', 'remaining', 'reset'].map((s) => `anthropic-ratelimit-tokens-${s}`),
      ],
    });
    const first = await pool.producer.enqueue(request('First.', 300));
    const second = await pool.producer.enqueue(request('Second.', 300));
    await pool.worker({
      baseURL: proxy.url,
      concurrency: 1,
      limiter: { windowMs: 5_000, limits: { tokens: 10_000 } },
    });
    await until(
      async () => ['failed', 'completed'].includes(await pool.queue.getJobState(second)),
      15_000,
    );
    expect(await pool.queue.getJobState(first)).toBe('completed');
    const [letter] = await pool.deadLetters();
    expect(letter).toMatchObject({ jobId: second, errorClass: 'RateLimitError', status: 429 });
    expect(letter!.reason).toMatch(
      /^429 without retry-after: This request would exceed the rate limit/,
    );
    expect(proxy.calls.map((c) => c.status)).toEqual([200, 429]);
    expect(
      (await new Limiter({ redis: pool.redis, names: pool.names }).snapshot()).pausedUntil,
    ).toBeNull();
  });

  it('a 429 the provider marks as never retryable (too big for its limit): dead-lettered, nobody paused', async () => {
    // The workers were told 10000 tokens; the provider allows 300 a window, so a call of
    // about 410 tokens can never be admitted and the 429 says not to retry (x-should-retry).
    const pool = await openTestPool('dlhuge', { windowMs: 5_000, limits: { tokens: 300 } });
    const huge = await pool.producer.enqueue(request('Too big.', 400));
    const small = await pool.producer.enqueue(request('Small.', 50));
    const worker = await pool.worker({
      concurrency: 1,
      limiter: { windowMs: 5_000, limits: { tokens: 10_000 } },
    });
    await until(async () => (await pool.queue.getJobState(huge)) === 'failed', 15_000);
    const [letter] = await pool.deadLetters();
    expect(letter).toMatchObject({ jobId: huge, status: 429 });
    expect(letter!.reason).toContain('can never be admitted');
    expect((await worker.limiter.snapshot()).pausedUntil).toBeNull();
    await allCompleted(pool, [small], 5_000);
    expect(pool.mock.stats().attempts).toBe(2);
  });
});
