/**
 * Message Batches in a pool: submitted through the first deployment that takes them (the Claude
 * API's), with its own key; a pool with none says so at start.
 */
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { Producer } from '../producer/producer.ts';
import { resolveConfig } from '../shared/config.ts';
import { ConfigError } from '../shared/errors.ts';
import type { BatchSubmitterHandle } from '../worker/batches/submitter.ts';
import { startSubmitterFor } from '../worker/batches/submitter-process.ts';
import { eachTestMocks } from './fixtures/mock-servers.ts';
import { deleteKeys, newRedis, REDIS_URL, testNames } from './helpers.ts';

const start = eachTestMocks();
const names = testNames('poolbatch');
const redis = newRedis();
const running: BatchSubmitterHandle[] = [];
afterEach(async () => {
  for (const s of running.splice(0)) await s.stop();
  await deleteKeys(redis, names.prefix);
});

const GCP = { name: 'gcp', kind: 'vertex', region: 'us-east5', projectId: 'mock-project' };
const configOf = (deployments: unknown[], baseUrl: string) =>
  resolveConfig({
    env: {
      REDIS_URL,
      LLMQ_QUEUE: names.queue,
      LLMQ_PREFIX: names.prefix,
      ANTHROPIC_API_KEY: 'sk-not-this-one',
      ANTHROPIC_BASE_URL: baseUrl,
      LLMQ_DEPLOYMENTS: JSON.stringify(deployments),
    },
  });
const sink = { write: () => true };

describe('Message Batches in a pool', () => {
  it("go through the first deployment that takes them, with that deployment's key", async () => {
    const [other, eu] = [await start(), await start()];
    eu.batches.setOptions({ processingMs: 100 });
    const config = configOf(
      [
        GCP,
        { name: 'eu', kind: 'anthropic', baseUrl: eu.url, credentials: { apiKeyEnv: 'KEY_EU' } },
      ],
      other.url,
    );
    const producer = new Producer({ redis, names });
    try {
      const ask = {
        model: 'claude-haiku-4-5',
        max_tokens: 20,
        messages: [{ role: 'user' as const, content: 'Hi.' }],
      };
      const ids = await producer.enqueueMany([ask, ask], { via: 'batches' });
      running.push(startSubmitterFor(config, sink, { KEY_EU: 'sk-test-eu' }));
      const results = await Promise.all(
        ids.map((id) => producer.waitForResult(id, { via: 'batches', timeout: 30_000 })),
      );
      for (const r of results) expect(r.batchId).toMatch(/^msgbatch_/);
      expect(eu.batches.stats()).toMatchObject({ created: 1, items: 2 });
      expect(other.batches.stats().created).toBe(0);
    } finally {
      await producer.close();
    }
  });

  it('refuse to start without a deployment that takes them, naming the pool', async () => {
    const config = configOf(
      [GCP, { name: 'eu', kind: 'anthropic', batches: false }],
      'http://127.0.0.1:9',
    );
    expect(() => startSubmitterFor(config, sink, {})).toThrow(ConfigError);
    expect(() => startSubmitterFor(config, sink, {})).toThrow(
      /Message Batches need a deployment that takes them .* the pool has none \(gcp: vertex, eu: anthropic\)/,
    );
  });
});

afterAll(() => redis.disconnect());
