import type { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Producer } from '../producer/producer.ts';
import { llmqKey, type QueueNames } from '../shared/keys.ts';
import { deleteKeys, newRedis, testNames } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
let producer: Producer;

beforeEach(() => {
  redis = newRedis();
  names = testNames('pcancel');
  producer = new Producer({ redis, names });
});
afterEach(async () => {
  await producer.close();
  await deleteKeys(redis, names.prefix);
  redis.disconnect();
});

const request = (text: string) => ({
  model: 'claude-test',
  max_tokens: 50,
  messages: [{ role: 'user', content: text }],
});
const notes = () => redis.zrange(llmqKey(names, 'cancelling'), '0', '-1');

describe('cancel', () => {
  it('removes a waiting job whole and leaves no note behind', async () => {
    const id = await producer.enqueue(request('cancel me'));
    expect(await producer.cancel(id)).toBe('cancelled');
    expect(await producer.queue.getJob(id)).toBeUndefined();
    expect(await notes()).toEqual([]);
    expect(await producer.cancel(id)).toBe('not_found');
  });

  it('a job taken out whose remove never came is finished by a later sweep, never left behind', async () => {
    const kept = await producer.enqueue(request('stays'));
    const id = await producer.enqueue(request('half cancelled'));
    // A producer that died between the two steps: taken out of waiting, its data still there.
    expect(await producer.gate.takeWaiting(id)).toBe(true);
    expect(await producer.queue.getJobState(id)).toBe('unknown');
    expect(await notes()).toEqual([id]);
    // Too recent to be stranded: its own producer may still be removing it.
    expect(await producer.finishStrandedCancels(60_000)).toBe(0);
    expect(await producer.finishStrandedCancels(0)).toBe(1);
    expect(await producer.queue.getJob(id)).toBeUndefined();
    expect(await notes()).toEqual([]);
    // Nothing else was touched.
    expect(await producer.queue.getJobState(kept)).toBe('prioritized');
  });
});
