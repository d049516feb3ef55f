import { spawnSync } from 'node:child_process';
import { PRIORITY_LIMIT } from 'bullmq';
import { describe, expect, it } from 'vitest';
import { runBatchSummarize } from '../producer/batch/summarize.ts';
import { hashApiKey } from '../producer/http/api-keys.ts';
import { RequestValidationError } from '../shared/errors.ts';
import { MAX_PRIORITY, resolvePriority } from '../shared/priority.ts';
import { API_VERSION } from './fixtures/gateway.ts';
import { jobCount, postJson, serveForFile } from './fixtures/http-api.ts';
import { llmqFromSource, REDIS_URL } from './helpers.ts';

const KEY = 'sk-priority-doors-0123456789';
const PROTO_NAMES = ['__proto__', 'toString', 'valueOf', 'constructor', 'hasOwnProperty'];
const BAD = [...PROTO_NAMES, 'urgent', '0', '-1', '1.5', ' 5', '1e3', String(MAX_PRIORITY + 1)];

const served = serveForFile('prio', { mock: true, apiKeys: `acme:${hashApiKey(KEY)}` });

const message = (text = 'Say hi.') => ({
  model: 'claude-test',
  max_tokens: 20,
  messages: [{ role: 'user', content: text }],
});

/** POSTs `body` as JSON with acme's key (unless `headers` say otherwise). */
const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  postJson(served.api, path, JSON.stringify(body), { authorization: `Bearer ${KEY}`, ...headers });

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
      const id = await served.api.producer.enqueue(message(), { priority: p });
      expect((await served.api.producer.queue.getJob(id))?.opts.priority).toBe(Number(p));
    }
    const before = await jobCount(served.api);
    for (const p of [...BAD, 2.5, MAX_PRIORITY + 1]) {
      await expect(
        served.api.producer.enqueue(message(), { priority: p }),
        String(p),
      ).rejects.toThrow(RequestValidationError);
    }
    expect(await jobCount(served.api)).toBe(before);
  });

  it('the job API answers 202 at both ends and 400 naming the field otherwise', async () => {
    for (const priority of [1, MAX_PRIORITY, 'interactive']) {
      const r = await post('/v1/jobs', { request: message(), priority });
      expect(r.status, String(priority)).toBe(202);
    }
    const before = await jobCount(served.api);
    for (const priority of [...BAD, MAX_PRIORITY + 1, 2.5]) {
      const r = await post('/v1/jobs', { request: message(), priority });
      expect(r.status, String(priority)).toBe(400);
      expect(r.body.error).toMatchObject({ code: 'invalid_request', field: 'priority' });
    }
    expect(await jobCount(served.api)).toBe(before);
  });

  it('the gateway header answers the API 400 for a bad priority, never a 500', async () => {
    const before = await jobCount(served.api);
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
    expect(await jobCount(served.api)).toBe(before);
  });

  it('a batch run refuses a bad priority before reading a file', async () => {
    for (const priority of PROTO_NAMES) {
      await expect(
        runBatchSummarize({
          producer: served.api.producer,
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
      env: {
        ...process.env,
        REDIS_URL,
        LLMQ_QUEUE: served.names.queue,
        LLMQ_PREFIX: served.names.prefix,
      },
      encoding: 'utf8',
    });
    expect(r.status).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/priority: must be .*"__proto__"/);
  });
});
