import type { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { JobFailedError, JobNotFoundError, WaitTimeoutError } from '../producer/errors.ts';
import { Producer } from '../producer/producer.ts';
import type { QueueNames } from '../shared/keys.ts';
import { type FakeWorker, startFakeWorker } from './fixtures/fake-worker.ts';
import { deleteKeys, newRedis, testNames } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
let producer: Producer;
const closers: (() => Promise<unknown>)[] = [];

beforeEach(() => {
  redis = newRedis();
  names = testNames('pwait');
  producer = new Producer({ redis, names });
});
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
  await producer.close();
  await deleteKeys(redis, names.prefix);
  redis.disconnect();
});

const request = (text: string) => ({
  model: 'claude-test',
  max_tokens: 64,
  messages: [{ role: 'user', content: text }],
});

/**
 * A stand-in for llmq's worker on the test's queue: echoes each prompt, and dead-letters those
 * that start with "fail".
 */
function startEchoWorker(): FakeWorker {
  const w = startFakeWorker(
    redis,
    names,
    (prompt) =>
      prompt.startsWith('fail')
        ? {
            deadLetter: {
              reason: '400 invalid_request_error: prompt is too long',
              errorClass: 'BadRequestError',
              status: 400,
            },
          }
        : { text: `echo: ${prompt}`, usage: { input_tokens: 10, output_tokens: 5 } },
    { concurrency: 20, requestId: 'req_test' },
  );
  closers.push(() => w.close());
  return w;
}

describe('waitForResult', () => {
  it('resolves with the result once a worker completes the job', async () => {
    const id = await producer.enqueue(request('hello'));
    startEchoWorker();
    const result = await producer.waitForResult(id, { timeout: 10_000 });
    expect(result.message.content).toEqual([{ type: 'text', text: 'echo: hello' }]);
    expect(result.message.usage.output_tokens).toBe(5);
  });

  it('resolves at once for a job that finished before anyone waited', async () => {
    const id = await producer.enqueue(request('early'));
    const { worker } = startEchoWorker();
    await new Promise<void>((resolve) => worker.on('completed', () => resolve()));
    const fresh = new Producer({ redis, names });
    closers.push(() => fresh.close());
    await expect(fresh.waitForResult(id, { timeout: 2_000 })).resolves.toMatchObject({
      requestId: 'req_test',
    });
  });

  it('rejects with the dead letter reason when the job is dead-lettered', async () => {
    const id = await producer.enqueue(request('fail please'));
    startEchoWorker();
    const err = await producer.waitForResult(id, { timeout: 10_000 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(JobFailedError);
    expect(err).toMatchObject({
      code: 'JOB_FAILED',
      jobId: id,
      reason: '400 invalid_request_error: prompt is too long',
      errorClass: 'BadRequestError',
      status: 400,
    });
  });

  it('rejects with TIMEOUT when the job does not finish in time, and the job stays queued', async () => {
    const id = await producer.enqueue(request('nobody works'));
    const started = Date.now();
    const err = await producer.waitForResult(id, { timeout: 300 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WaitTimeoutError);
    expect(err).toMatchObject({ code: 'TIMEOUT', jobId: id });
    expect(Date.now() - started).toBeLessThan(2_000);
    expect((await producer.status(id))?.state).toBe('waiting');
  });

  it('rejects with JOB_NOT_FOUND for an unknown id and when the job is cancelled meanwhile', async () => {
    await expect(producer.waitForResult('no-such-job', { timeout: 1_000 })).rejects.toBeInstanceOf(
      JobNotFoundError,
    );
    const id = await producer.enqueue(request('to be cancelled'));
    const waiting = producer.waitForResult(id, { timeout: 10_000 }).catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 100));
    expect(await producer.cancel(id)).toBe('cancelled');
    expect(await waiting).toBeInstanceOf(JobNotFoundError);
  });

  it('serves many waiters at once from one subscription', async () => {
    const ids = await producer.enqueueMany(
      Array.from({ length: 300 }, (_, i) => request(i % 50 === 0 ? `fail ${i}` : `n${i}`)),
    );
    const outcomes = Promise.allSettled(
      ids.map((id) => producer.waitForResult(id, { timeout: 20_000 })),
    );
    startEchoWorker();
    const settled = await outcomes;
    expect(settled.filter((s) => s.status === 'fulfilled')).toHaveLength(294);
    const failed = settled.filter((s): s is PromiseRejectedResult => s.status === 'rejected');
    expect(failed).toHaveLength(6);
    for (const f of failed) expect(f.reason).toBeInstanceOf(JobFailedError);
  });

  it('an abort signal stops the wait', async () => {
    const id = await producer.enqueue(request('abort me'));
    const ac = new AbortController();
    const waiting = producer.waitForResult(id, { signal: ac.signal }).catch((e: unknown) => e);
    ac.abort(new Error('stop'));
    expect(await waiting).toMatchObject({ message: 'stop' });
  });
});
