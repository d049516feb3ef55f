import Anthropic from '@anthropic-ai/sdk';
import type { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { JobFailedError } from '../producer/errors.ts';
import { Producer } from '../producer/producer.ts';
import type { QueueNames } from '../shared/keys.ts';
import { type MockAnthropicHandle, startMockAnthropic } from '../testing/mock-anthropic/index.ts';
import { type BatchSubmitterHandle, startBatchSubmitter } from '../worker/batches/submitter.ts';
import { showDeadLetter } from '../worker/dead-letters.ts';
import { createProviderClient } from '../worker/provider.ts';
import { startWorker } from '../worker/worker.ts';
import { deleteKeys, newRedis, testNames } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
let mock: MockAnthropicHandle;
let producer: Producer;
const running: BatchSubmitterHandle[] = [];

beforeEach(async () => {
  redis = newRedis();
  names = testNames('bsub');
  mock = await startMockAnthropic();
  mock.batches.setOptions({ processingMs: 150 });
  producer = new Producer({ redis, names });
});
afterEach(async () => {
  for (const s of running.splice(0)) await s.stop();
  await producer.close();
  await mock.close();
  await deleteKeys(redis, names.prefix);
  redis.disconnect();
});

function submitter(): BatchSubmitterHandle {
  const s = startBatchSubmitter({
    redis: newRedis(),
    names,
    client: new Anthropic({ apiKey: 'sk-test', baseURL: mock.url, maxRetries: 0 }),
    pollMs: 50,
    gatherMs: 100,
    tickMs: 50,
  });
  running.push(s);
  return s;
}

const request = (text: string) => ({
  model: 'claude-haiku-4-5',
  max_tokens: 40,
  messages: [{ role: 'user', content: text }],
});

describe('the batch submitter', () => {
  it('completes jobs enqueued via batches with the same result shape as messages', async () => {
    const ids = await producer.enqueueMany(
      [0, 1, 2, 3, 4].map((i) => request(`doc ${i}`)),
      { via: 'batches' },
    );
    // Nothing reaches the per-minute queue.
    expect(await producer.queue.count()).toBe(0);
    submitter();
    const results = await Promise.all(
      ids.map((id) => producer.waitForResult(id, { via: 'batches' })),
    );
    for (const r of results) {
      expect(r.message.role).toBe('assistant');
      expect(r.message.usage.output_tokens).toBeGreaterThan(0);
      expect(r.batchId).toMatch(/^msgbatch_/);
      expect(r.attempts).toBe(1);
    }
    expect(mock.batches.stats()).toMatchObject({ created: 1, items: 5 });
    expect(mock.stats().attempts).toBe(0);
  });

  it('retries a retryable errored item and expired items in a new batch, and dead-letters a final error', async () => {
    mock.batches.setFaults({ erroredItems: 1, expiredBatches: 1 });
    const ids = await Promise.all(
      [0, 1, 2, 3].map((i) => producer.enqueue(request(`doc ${i}`), { via: 'batches' })),
    );
    const bad = await producer.enqueue(
      { model: 'gpt-4', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] },
      { via: 'batches' },
    );
    submitter();
    const results = await Promise.all(
      ids.map((id) => producer.waitForResult(id, { via: 'batches' })),
    );
    expect(results.some((r) => r.attempts > 1)).toBe(true);
    const err = await producer.waitForResult(bad, { via: 'batches' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(JobFailedError);
    expect((err as JobFailedError).reason).toMatch(/404 not_found_error: model: gpt-4/);
    expect((await showDeadLetter(producer.deadLetters, bad))?.errorClass).toBe('NotFoundError');
    expect(mock.batches.stats().created).toBeGreaterThanOrEqual(2);
  });

  it('refuses a streamed request via batches, enqueueing nothing', async () => {
    await expect(
      producer.enqueue({ ...request('x'), stream: true }, { via: 'batches' }),
    ).rejects.toThrow(/stream: the Message Batches API does not stream/);
    expect(await producer.batchJobs.queue.count()).toBe(0);
  });

  it('sends items that would miss their deadline through messages instead of another batch', async () => {
    mock.batches.setFaults({ expiredBatches: 1 });
    // Half an hour left: less than the hour another batch may take.
    const deadlineAt = Date.now() + 30 * 60_000;
    const ids = await Promise.all(
      [0, 1, 2, 3].map((i) =>
        producer.enqueue(request(`doc ${i}`), { via: 'batches', deadlineAt }),
      ),
    );
    const conn = newRedis();
    const worker = await startWorker({
      redis: conn,
      names,
      client: createProviderClient({ apiKey: 'sk-test', baseURL: mock.url }),
      limiter: {},
      concurrency: 4,
    });
    try {
      submitter();
      const results = await Promise.all(
        ids.map((id) => producer.waitForResult(id, { via: 'batches' })),
      );
      // Two were answered by the batch, the two it left expired went through messages.
      expect(results.filter((r) => r.batchId !== undefined)).toHaveLength(2);
      expect(results.filter((r) => r.requestId !== null)).toHaveLength(2);
      expect(mock.batches.stats().created).toBe(1);
      expect(mock.stats().admitted).toBe(2);
    } finally {
      await worker.stop(2_000).catch(() => {});
      conn.disconnect();
    }
  });
});
