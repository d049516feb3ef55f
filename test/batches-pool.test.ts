/**
 * Message Batches in a pool of deployments: batches go only to deployments that take them (a
 * pinned job's to its pin, the others' to the first by preference), each result names its
 * deployment; a batch job no deployment can take is dead-lettered with why.
 */
import Anthropic from '@anthropic-ai/sdk';
import type { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { JobFailedError } from '../producer/errors.ts';
import { Producer } from '../producer/producer.ts';
import type { QueueNames } from '../shared/keys.ts';
import type { MockAnthropicHandle } from '../testing/mock-anthropic/index.ts';
import type { BatchDeployment } from '../worker/batches/batch-deployments.ts';
import { type BatchSubmitterHandle, startBatchSubmitter } from '../worker/batches/submitter.ts';
import { eachTestMocks } from './fixtures/mock-servers.ts';
import { deleteKeys, newRedis, testNames } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
let producer: Producer;
const running: BatchSubmitterHandle[] = [];
const startMock = eachTestMocks();

beforeEach(() => {
  redis = newRedis();
  names = testNames('bpool');
  producer = new Producer({ redis, names });
});
afterEach(async () => {
  for (const s of running.splice(0)) await s.stop();
  await producer.close();
  await deleteKeys(redis, names.prefix);
  redis.disconnect();
});

const request = (text: string) => ({
  model: 'claude-haiku-4-5',
  max_tokens: 40,
  messages: [{ role: 'user', content: text }],
});

async function batchMock(): Promise<MockAnthropicHandle> {
  const mock = await startMock();
  mock.batches.setOptions({ processingMs: 100 });
  return mock;
}

const on = (name: string, mock: MockAnthropicHandle): BatchDeployment => ({
  name,
  client: new Anthropic({ apiKey: `sk-test-${name}`, baseURL: mock.url, maxRetries: 0 }),
});

function submitter(deployments: readonly BatchDeployment[]): void {
  running.push(
    startBatchSubmitter({
      redis: newRedis(),
      names,
      deployments,
      pollMs: 50,
      gatherMs: 100,
      tickMs: 50,
    }),
  );
}

const failure = (id: string) =>
  producer.waitForResult(id, { via: 'batches', timeout: 20_000 }).then(
    () => undefined,
    (e: unknown) => e as JobFailedError,
  );

describe('Message Batches in a pool', () => {
  it("sends unpinned jobs to the first deployment taking batches, pinned ones to their pin's; results name it", async () => {
    const [eu, us] = await Promise.all([batchMock(), batchMock()]);
    submitter([on('eu', eu), on('us', us)]);
    const free = await producer.enqueueMany(
      [0, 1, 2].map((i) => request(`doc ${i}`)),
      {
        via: 'batches',
      },
    );
    const pinned = await producer.enqueueMany(
      [3, 4].map((i) => request(`doc ${i}`)),
      {
        via: 'batches',
        deployment: 'us',
      },
    );
    const wait = (id: string) => producer.waitForResult(id, { via: 'batches', timeout: 20_000 });
    for (const r of await Promise.all(free.map(wait))) expect(r.deployment).toBe('eu');
    for (const r of await Promise.all(pinned.map(wait))) expect(r.deployment).toBe('us');
    expect(eu.batches.stats()).toMatchObject({ created: 1, items: 3 });
    expect(us.batches.stats()).toMatchObject({ created: 1, items: 2 });
    const job = await producer.status(free[0]!);
    expect(job?.data.history?.at(-1)).toMatchObject({ outcome: 'ok', deployment: 'eu' });
  });

  it('dead-letters a batch job when no deployment of the pool takes batches, or its pin does not', async () => {
    const eu = await batchMock();
    submitter([on('eu', eu)]);
    const [pinned] = await producer.enqueueMany([request('doc 0')], {
      via: 'batches',
      deployment: 'aws',
    });
    const err = await failure(pinned!);
    expect(err).toBeInstanceOf(JobFailedError);
    expect(err!.message).toContain(
      'the job pins deployment "aws", which takes no Message Batches in this pool (those that do: eu)',
    );
    for (const s of running.splice(0)) await s.stop();

    submitter([]);
    const id = await producer.enqueue(request('doc 1'), { via: 'batches' });
    expect((await failure(id))!.message).toContain(
      'no deployment of the pool takes Message Batches',
    );
    expect(eu.batches.stats()).toMatchObject({ created: 0 });
  });
});
