import { spawnSync } from 'node:child_process';
import { PRIORITY_LIMIT } from 'bullmq';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runBatchSummarize } from '../producer/batch/summarize.ts';
import { hashApiKey } from '../producer/http/api-keys.ts';
import { type HttpApi, startHttpApi } from '../producer/http/server.ts';
import { resolveConfig } from '../shared/config.ts';
import { RequestValidationError } from '../shared/errors.ts';
import type { QueueNames } from '../shared/keys.ts';
import { MAX_PRIORITY, resolvePriority } from '../shared/priority.ts';
import { type MockAnthropicHandle, startMockAnthropic } from '../testing/mock-anthropic/index.ts';
import { API_VERSION } from './fixtures/gateway.ts';
import { deleteKeys, llmqFromSource, newRedis, REDIS_URL, testNames } from './helpers.ts';

const KEY = 'sk-priority-doors-0123456789';
const PROTO_NAMES = ['__proto__', 'toString', 'valueOf', 'constructor', 'hasOwnProperty'];
const BAD = [...PROTO_NAMES, 'urgent', '0', '-1', '1.5', ' 5', '1e3', String(MAX_PRIORITY + 1)];

let redis: Redis;
let names: QueueNames;
let mock: MockAnthropicHandle;
let api: HttpApi;

beforeAll(async () => {
  redis = newRedis();
  names = testNames('prio');
  mock = await startMockAnthropic();
  api = await startHttpApi({
    config: resolveConfig({
      flags: { queue: names.queue, prefix: names.prefix, redisUrl: REDIS_URL },
      env: { ANTHROPIC_API_KEY: 'sk-provider', ANTHROPIC_BASE_URL: mock.url },
    }),
    apiKeys: `acme:${hashApiKey(KEY)}`,
    port: 0,
  });
});
afterAll(async () => {
  await api?.close();
  await mock?.close();
  await deleteKeys(redis, names.prefix);
  redis.disconnect();
});

const message = (text = 'Say hi.') => ({
  model: 'claude-test',
  max_tokens: 20,
  messages: [{ role: 'user', content: text }],
});

async function post(path: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${api.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}`, ...headers },
    body: JSON.stringify(body),
  });
  // biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by tests
  return { status: res.status, body: (await res.json()) as any };
}
const jobCount = async () =>
  Object.values(await api.producer.queue.getJobCounts()).reduce((a, b) => a + b, 0);

describe('one priority rule', () => {
  it("the documented maximum is BullMQ's own limit, and both ends resolve", () => {
    expect(MAX_PRIORITY).toBe(PRIORITY_LIMIT);
    expect(resolvePriority(1)).toBe(1);
    expect(resolvePriority(MAX_PRIORITY)).toBe(MAX_PRIORITY);
    expect(resolvePriority(String(MAX_PRIORITY))).toBe(MAX_PRIORITY);
    expect(resolvePriority('batch')).toBe(1_000);
  });

  it('prototype names and out-of-range values are refused with a typed error naming the value', () => {
    for (const p of [...BAD, 0, MAX_PRIORITY + 1, 2.5, Number.NaN, {}, null]) {
      let caught: unknown;
      try {
        resolvePriority(p);
      } catch (err) {
        caught = err;
      }
      expect(caught, String(p)).toBeInstanceOf(RequestValidationError);
      expect((caught as RequestValidationError).field).toBe('priority');
    }
    expect(() => resolvePriority('__proto__')).toThrow(/got "__proto__"/);
  });
});

describe('every door', () => {
  it('the library enqueues both ends and refuses the rest with a RequestValidationError', async () => {
    for (const p of [1, MAX_PRIORITY, String(MAX_PRIORITY)]) {
      const id = await api.producer.enqueue(message(), { priority: p });
      expect((await api.producer.queue.getJob(id))?.opts.priority).toBe(Number(p));
    }
    const before = await jobCount();
    for (const p of [...BAD, 2.5, MAX_PRIORITY + 1]) {
      await expect(api.producer.enqueue(message(), { priority: p }), String(p)).rejects.toThrow(
        RequestValidationError,
      );
    }
    expect(await jobCount()).toBe(before);
  });

  it('the job API answers 202 at both ends and 400 naming the field otherwise', async () => {
    for (const priority of [1, MAX_PRIORITY, 'interactive']) {
      const r = await post('/v1/jobs', { request: message(), priority });
      expect(r.status, String(priority)).toBe(202);
    }
    const before = await jobCount();
    for (const priority of [...BAD, MAX_PRIORITY + 1, 2.5]) {
      const r = await post('/v1/jobs', { request: message(), priority });
      expect(r.status, String(priority)).toBe(400);
      expect(r.body.error).toMatchObject({ code: 'invalid_request', field: 'priority' });
    }
    expect(await jobCount()).toBe(before);
  });

  it('the gateway header answers the API 400 for a bad priority, never a 500', async () => {
    const before = await jobCount();
    // (fetch trims a header's spaces: ' 5' would be a good priority there.)
    for (const p of BAD.filter((b) => b !== ' 5')) {
      const r = await post('/v1/messages', message(), {
        'x-api-key': KEY,
        'llmq-priority': p,
        ...API_VERSION,
      });
      expect(r.status, p).toBe(400);
      expect(r.body.error.type).toBe('invalid_request_error');
      expect(r.body.error.message).toMatch(/^llmq-priority: must be/);
    }
    expect(await jobCount()).toBe(before);
  });

  it('a batch run refuses a bad priority before reading a file', async () => {
    for (const priority of PROTO_NAMES) {
      await expect(
        runBatchSummarize({
          producer: api.producer,
          paths: ['/nonexistent'],
          out: '/nonexistent/x',
          priority,
        }),
      ).rejects.toThrow(RequestValidationError);
    }
  });

  it('the CLI exits 2 with one line for a bad --priority', () => {
    const r = spawnSync(process.execPath, llmqFromSource(['enqueue', '--priority', '__proto__']), {
      input: JSON.stringify(message()),
      env: { ...process.env, REDIS_URL, LLMQ_QUEUE: names.queue, LLMQ_PREFIX: names.prefix },
      encoding: 'utf8',
    });
    expect(r.status).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/priority: must be .*"__proto__"/);
  });
});
