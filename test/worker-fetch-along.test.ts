import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Producer } from '../producer/producer.ts';
import { bullPrefix, type QueueNames } from '../shared/keys.ts';
import type { Limiter } from '../shared/limiter/limiter.ts';
import { type GateWorker, openGateWorker } from '../worker/bullmq-internals.ts';
import { FetchAlong } from '../worker/fetch-along.ts';
import { deleteKeys, newRedis, testLimiter, testNames } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
let producer: Producer;
let bull: GateWorker;
let queue: Queue;
let limiter: Limiter;
let n = 0;

beforeEach(async () => {
  redis = newRedis();
  names = testNames('along');
  producer = new Producer({ redis, names });
  bull = openGateWorker(redis, names, {
    lockDuration: 30_000,
    stalledInterval: 30_000,
    maxStalledCount: 1,
  });
  queue = new Queue(names.queue, { connection: redis.duplicate(), prefix: bullPrefix(names) });
  limiter = testLimiter({ redis, names, limits: { requests: 2 } });
  for (const text of ['a', 'b', 'c']) await producer.enqueue(request(text));
});
afterEach(async () => {
  await producer.close();
  await bull.close();
  await queue.close();
  await limiter.close();
  await deleteKeys(redis, names.prefix);
  redis.disconnect();
});

const request = (text: string) => ({
  model: 'claude-test',
  max_tokens: 16,
  messages: [{ role: 'user' as const, content: text }],
});
const cost = { requests: 1, inputTokens: 10, outputTokens: 16 };

/** One attempt for `k` jobs with their fetches in its round trip: reservations and jobs fetched. */
async function attempt(k: number, giveBack = false) {
  const heads = Array.from({ length: k }, (_, i) => ({ id: `head-${i}` }));
  const along = new FetchAlong(bull, heads, () => `tok${n++}`);
  const more = Array.from({ length: k - 1 }, () => cost);
  const a = await limiter.line(cost, { more }).attempt(along.along);
  const jobs = await Promise.all(along.fetches.map((f) => f.job));
  // What is not run goes back (the gate releases a reservation it does not use).
  if (a.ok && giveBack) await Promise.all(a.reservations.slice(1).map((r) => limiter.release(r)));
  return { admitted: a.ok ? a.reservations.length : 0, fetched: jobs.filter((j) => j).length };
}

const meta = () => redis.hgetall(`${bullPrefix(names)}:${names.queue}:meta`);

describe('fetches sent with the acquire, in one round trip', () => {
  it('fetch exactly the jobs admitted; none when denied; the queue meta is left as it was', async () => {
    const before = await meta();
    // Room for two calls of the three asked for.
    expect(await attempt(3)).toEqual({ admitted: 2, fetched: 2 });
    expect(await queue.getJobCounts('active', 'prioritized')).toEqual({
      active: 2,
      prioritized: 1,
    });
    // No room left: denied, and the last job stays where it was.
    expect(await attempt(1)).toEqual({ admitted: 0, fetched: 0 });
    expect(await queue.getJobCounts('active', 'prioritized')).toEqual({
      active: 2,
      prioritized: 1,
    });
    expect(await meta()).toEqual(before);
  });

  it("keeps the queue owner's lower global concurrency, and a paused queue hands out nothing", async () => {
    await queue.setGlobalConcurrency(1);
    expect(await attempt(2, true)).toEqual({ admitted: 2, fetched: 1 });
    expect((await meta())['concurrency']).toBe('1');
    await queue.setGlobalConcurrency(5);
    await queue.pause();
    const paused = await meta();
    expect(await attempt(1)).toEqual({ admitted: 1, fetched: 0 });
    expect(await meta()).toEqual(paused);
    expect(await queue.getJobCounts('active')).toEqual({ active: 1 });
  });
});
