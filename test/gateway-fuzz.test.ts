import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HttpApi } from '../producer/http/server.ts';
import { API_ERROR_STATUS } from '../shared/api-error-types.ts';
import { API_VERSION, startGateway, TENANT_KEYS } from './fixtures/gateway.ts';
import { mutatedJson, sendRaw } from './fixtures/raw-http.ts';
import { API_KEY, openPool, type Pool } from './fixtures/worker-harness.ts';

let pool: Pool;
let api: HttpApi;
let port: number;

beforeAll(async () => {
  pool = await openPool('gwfuzz', { latencyMs: 0, latencyPerOutputTokenMs: 0 });
  await pool.worker({ concurrency: 8 });
  api = await startGateway(
    pool,
    {},
    {
      bodyLimit: 8_000,
      maxWaitMs: 30_000,
      // The auth backoff has its own test; here every request reaches the routes.
      authThrottle: { maxFailures: 1_000_000, baseDelayMs: 60_000, log: () => {} },
    },
  );
  port = Number(new URL(api.url).port);
});
afterAll(async () => {
  await api?.close();
  await pool?.cleanup();
});

const send = (method: string, path: string, headers: Record<string, string>, body?: string) =>
  sendRaw({ host: '127.0.0.1', port }, method, path, headers, body);

async function jobCount(): Promise<number> {
  const c = await pool.queue.getJobCounts();
  return Object.values(c).reduce((a, b) => a + b, 0);
}

const valid = {
  model: 'claude-test-1',
  max_tokens: 20,
  messages: [{ role: 'user', content: 'Hello' }],
};

/** A valid Messages body with one part replaced by something random. */
const mutated = mutatedJson(valid, [
  'model',
  'max_tokens',
  'messages',
  'messages.0.role',
  'messages.0.content',
  'system',
  'stream',
  'temperature',
  'stop_sequences',
  'metadata',
  'tools',
  'unknown_field',
]);

const body = fc.oneof(
  { arbitrary: mutated, weight: 3 },
  fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify(v)),
  fc.string({ maxLength: 200 }),
  fc.constantFrom('', '{', 'null', '[]', '{}', '\u0000', 'x'.repeat(9_000)),
  { arbitrary: fc.constant(JSON.stringify(valid)), weight: 3 },
  { arbitrary: fc.constant(JSON.stringify({ ...valid, stream: true })), weight: 2 },
);

const path = fc.constantFrom(
  '/v1/messages',
  '/v1/messages/',
  '//v1/messages',
  '/v1//messages',
  '/v1/messages/count_tokens',
  '/v1/messages/../messages',
  '/v1/messages/%2e%2e/count_tokens',
  '/v1%2fmessages',
  '/v1/messages?beta=true',
  '/v1/messages?x=%zz',
  '/V1/MESSAGES',
  '/v1/messages/%00',
);

const key = fc.oneof(
  { arbitrary: fc.constantFrom(TENANT_KEYS.acme, TENANT_KEYS.beta), weight: 3 },
  fc.constantFrom(API_KEY, '', 'k'.repeat(600)),
  fc.string({ unit: 'grapheme-ascii', maxLength: 60 }).map((s) => s.replace(/[\r\n]/g, '')),
);
/** Mostly what a client sends, sometimes anything. */
const usually = <T>(common: T, any: fc.Arbitrary<T>) =>
  fc.oneof({ arbitrary: fc.constant(common), weight: 3 }, any);

const fuzzRequest = fc.record(
  {
    method: usually('POST', fc.constantFrom('GET', 'PUT', 'DELETE', 'HEAD')),
    path: usually('/v1/messages', path),
    xApiKey: key,
    // Mostly the same key as x-api-key (two different keys are refused as a conflict).
    authorization: fc.oneof(
      { arbitrary: fc.constant('same'), weight: 3 },
      key.map((k) => `Bearer ${k}`),
    ),
    contentType: usually(
      'application/json',
      fc.constantFrom(
        'application/json; charset=utf-8',
        'text/plain',
        'application/x-www-form-urlencoded',
        '',
      ),
    ),
    version: usually('2023-06-01', fc.constantFrom('', 'x'.repeat(300), 'bad\tvalue')),
    beta: usually('tools-2024-04-04', fc.string({ unit: 'grapheme-ascii', maxLength: 40 })),
    priority: usually(
      'default',
      fc.oneof(
        fc.constantFrom('interactive', 'batch', '1', '0', '-3', '1e9', 'urgent'),
        fc.string({ unit: 'grapheme-ascii', maxLength: 10 }),
      ),
    ),
    idempotency: fc.oneof(fc.uuid(), fc.string({ unit: 'grapheme-ascii', maxLength: 300 })),
    body,
  },
  // Mostly with the version header every SDK sends (without it the API answers 400).
  { requiredKeys: ['method', 'path', 'contentType', 'version', 'body'] },
);

const API_TYPES = new Set(Object.keys(API_ERROR_STATUS));

describe('the Messages gateway under fuzzing', () => {
  it('never answers 5xx, errors in the API shape, and nothing enqueued behind its own 4xx', async () => {
    const statuses = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(fuzzRequest, async (r) => {
        const headers: Record<string, string> = {};
        if (r.xApiKey !== undefined) headers['x-api-key'] = r.xApiKey;
        const authorization =
          r.authorization === 'same'
            ? r.xApiKey !== undefined
              ? `Bearer ${r.xApiKey}`
              : undefined
            : r.authorization;
        if (authorization !== undefined) headers['authorization'] = authorization;
        if (r.contentType) headers['content-type'] = r.contentType;
        if (r.version !== undefined) headers['anthropic-version'] = r.version;
        if (r.beta !== undefined) headers['anthropic-beta'] = r.beta;
        if (r.priority !== undefined) headers['llmq-priority'] = r.priority;
        if (r.idempotency !== undefined) headers['idempotency-key'] = r.idempotency;
        const before = await jobCount();
        const res = await send(r.method, r.path, headers, r.body);
        const after = await jobCount();
        const what = `${r.method} ${r.path}: ${res.status} ${res.text.slice(0, 200)}`;
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        expect(res.status, what).toBeGreaterThanOrEqual(200);
        expect(res.status, what).toBeLessThan(500);
        for (const secret of [API_KEY, TENANT_KEYS.acme, TENANT_KEYS.beta]) {
          expect(res.text).not.toContain(secret);
        }
        if (res.status >= 400 && r.method !== 'HEAD') {
          const e = JSON.parse(res.text) as {
            type?: string;
            error?: { type?: string; code?: string };
          };
          // The Messages routes answer as the API does; anything else in llmq's shape.
          expect(
            API_TYPES.has(e.error?.type ?? '') || typeof e.error?.code === 'string',
            what,
          ).toBe(true);
          // A job made and then refused by the provider says which; any other 4xx made none.
          if (res.headers['llmq-job-id'] === undefined) expect(after, what).toBe(before);
        }
        expect(after - before, what).toBeLessThanOrEqual(1);
      }),
      { numRuns: 200, seed: Number(process.env['LLMQ_FUZZ_SEED'] ?? Date.now() % 1e9) },
    );
    // The runs reached every layer: the queue and the provider too, not only the checks.
    // (About one run in twenty draws a whole valid request: at least a few of 200 reach it.)
    expect(statuses.get(200) ?? 0, JSON.stringify([...statuses])).toBeGreaterThanOrEqual(3);
    expect(statuses.get(400) ?? 0).toBeGreaterThan(0);
    // Still whole: a plain call is answered.
    const ok = await send(
      'POST',
      '/v1/messages',
      { 'x-api-key': TENANT_KEYS.acme, 'content-type': 'application/json', ...API_VERSION },
      JSON.stringify(valid),
    );
    expect(ok.status).toBe(200);
    expect(JSON.parse(ok.text).type).toBe('message');
  });
});
