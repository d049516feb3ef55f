import { type Job, Queue, Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Producer } from '../producer/producer.ts';
import { bullPrefix, type QueueNames } from '../shared/keys.ts';
import {
  assertBullmqVersion,
  HeadPeeker,
  installedBullmqVersion,
} from '../worker/bullmq-internals.ts';
import { deleteKeys, newRedis, testNames } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
let producer: Producer;
let worker: Worker;
let queue: Queue;

beforeEach(() => {
  redis = newRedis();
  names = testNames('head');
  producer = new Producer({ redis, names });
  worker = new Worker(names.queue, null, {
    connection: redis.duplicate(),
    prefix: bullPrefix(names),
    autorun: false,
  });
  queue = new Queue(names.queue, { connection: redis.duplicate(), prefix: bullPrefix(names) });
});
afterEach(async () => {
  await producer.close();
  await worker.close();
  await queue.close();
  await (worker.opts.connection as Redis).quit();
  await (queue.opts.connection as Redis).quit();
  await deleteKeys(redis, names.prefix);
  redis.disconnect();
});

const request = (text: string) => ({
  model: 'claude-test',
  max_tokens: 16,
  messages: [{ role: 'user', content: text }],
});

/** A job added straight to BullMQ's delayed set (as a retry is), due in 1 ms. */
async function addDelayed(text: string, priority: number): Promise<string> {
  const job = await queue.add(
    'llmq',
    { request: request(text), cost: { requests: 1, inputTokens: 5, outputTokens: 16 }, priority },
    { delay: 1, priority },
  );
  await new Promise((r) => setTimeout(r, 20));
  return job.id!;
}

/** The ids BullMQ itself hands out next, taking `n` jobs. */
async function takeOrder(n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const job = (await worker.getNextJob(`t${i}`, { block: false })) as Job | undefined;
    if (!job) break;
    ids.push(job.id!);
  }
  return ids;
}

describe('peeking at the jobs BullMQ hands out next', () => {
  it('gives them in BullMQ order: priority first, then arrival', async () => {
    const a = await producer.enqueue(request('a'), { priority: 'batch' });
    const b = await producer.enqueue(request('b'), { priority: 'interactive' });
    const c = await producer.enqueue(request('c'), { priority: 'batch' });
    const d = await producer.enqueue(request('d'), { priority: 'interactive' });
    const peeker = new HeadPeeker(redis, names);
    const heads = await peeker.peekMany(3);
    expect(heads.map((h) => h.id)).toEqual([b, d, a]);
    // Charged to its model's scope (its limits are the model's).
    expect(heads[0]).toMatchObject({ priority: expect.any(Number), scopes: ['model:claude-test'] });
    expect(heads[0]!.cost.outputTokens).toBe(16);
    // Peeking took nothing, and BullMQ agrees on the order.
    expect(await takeOrder(4)).toEqual([b, d, a, c]);
    expect(await peeker.peekMany(3)).toEqual([]);
  });

  it('puts a due delayed job where its promotion will: ahead of less urgent ones', async () => {
    const a = await producer.enqueue(request('a'), { priority: 'batch' });
    const b = await producer.enqueue(request('b'), { priority: 'batch' });
    const late = await addDelayed('late', 1);
    expect((await new HeadPeeker(redis, names).peekMany(3)).map((h) => h.id)).toEqual([late, a, b]);
    expect(await takeOrder(3)).toEqual([late, a, b]);
  });

  it('puts a due delayed job between jobs of higher and lower priority, behind its peers', async () => {
    const a = await producer.enqueue(request('a'), { priority: 10 });
    const b = await producer.enqueue(request('b'), { priority: 100 });
    const peer = await producer.enqueue(request('peer'), { priority: 50 });
    const mid = await addDelayed('mid', 50);
    const order = [a, peer, mid, b];
    expect((await new HeadPeeker(redis, names).peekMany(4)).map((h) => h.id)).toEqual(order);
    expect(await takeOrder(4)).toEqual(order);
  });

  it('gives only the first job when more delayed jobs are due than one peek looks at', async () => {
    const first = await producer.enqueue(request('first'), { priority: 1 });
    await producer.enqueue(request('second'), { priority: 1 });
    await queue.addBulk(
      Array.from({ length: 100 }, (_, i) => ({
        name: 'llmq',
        data: {
          request: request(`d${i}`),
          cost: { requests: 1, inputTokens: 5, outputTokens: 16 },
          priority: 100,
        },
        opts: { delay: 1, priority: 100 },
      })),
    );
    await new Promise((r) => setTimeout(r, 20));
    expect((await new HeadPeeker(redis, names).peekMany(5)).map((h) => h.id)).toEqual([first]);
  });

  it('gives none while the queue is paused', async () => {
    await producer.enqueue(request('a'));
    await queue.pause();
    expect(await new HeadPeeker(redis, names).peekMany(5)).toEqual([]);
    await queue.resume();
    expect(await new HeadPeeker(redis, names).peekMany(5)).toHaveLength(1);
  });
});

describe('the BullMQ version check', () => {
  it('accepts the installed bullmq, 6.7.x', () => {
    expect(installedBullmqVersion()).toMatch(/^6\.7\./);
    expect(() => assertBullmqVersion()).not.toThrow();
    expect(() => assertBullmqVersion('6.7.12')).not.toThrow();
  });

  it('refuses another version, naming it and what to install', () => {
    for (const v of ['6.8.0', '7.0.0', '5.7.1']) {
      expect(() => assertBullmqVersion(v)).toThrow(
        `bullmq ${v} is installed, but llmq's worker reads BullMQ 6.7's keys and scripts`,
      );
    }
    expect(() => assertBullmqVersion('7.0.0')).toThrow(/install bullmq 6\.7\.x/);
  });
});
