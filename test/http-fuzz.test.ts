import { request as httpRequest } from 'node:http';
import fc from 'fast-check';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashApiKey } from '../producer/http/api-keys.ts';
import { OPENAPI } from '../producer/http/openapi.ts';
import { type HttpApi, startHttpApi } from '../producer/http/server.ts';
import { resolveConfig } from '../shared/config.ts';
import type { QueueNames } from '../shared/keys.ts';
import { mutatedJson, type RawResponse, sendRaw } from './fixtures/raw-http.ts';
import { deleteKeys, newRedis, REDIS_URL, testNames } from './helpers.ts';

const ACME_KEY = 'sk-acme-fuzz-0123456789';
const BETA_KEY = 'sk-beta-fuzz-9876543210';
const API_KEYS = `acme:${hashApiKey(ACME_KEY)},beta:${hashApiKey(BETA_KEY)}`;
/** The error codes the OpenAPI document promises. */
const CODES = new Set<string>(
  (
    OPENAPI.components.schemas as unknown as Record<
      string,
      { properties: { error: { properties: { code: { enum: string[] } } } } }
    >
  )['Error']!.properties.error.properties.code.enum,
);

let redis: Redis;
let names: QueueNames;
let api: HttpApi;
let host: string;
let port: number;
const logged: string[] = [];

/** Starts an API on the shared Redis; `maxFailures` for its auth throttle. */
async function start(maxFailures: number, on: QueueNames = names): Promise<HttpApi> {
  return startHttpApi({
    config: resolveConfig({
      flags: { queue: on.queue, prefix: on.prefix, maxDepth: '0', redisUrl: REDIS_URL },
      env: {},
    }),
    apiKeys: API_KEYS,
    port: 0,
    bodyLimit: 8_000,
    maxWaitMs: 1_000,
    authThrottle: { maxFailures, baseDelayMs: 60_000, log: (l) => logged.push(l) },
  });
}

beforeAll(async () => {
  redis = newRedis();
  names = testNames('fuzz');
  api = await start(1_000_000);
  const u = new URL(api.url);
  host = u.hostname;
  port = Number(u.port);
});
afterAll(async () => {
  await api.close();
  await deleteKeys(redis, names.prefix);
  redis.disconnect();
});

/** One request sent as given, to this API or (`to`) another. */
const send = (
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: string,
  to = port,
): Promise<RawResponse> => sendRaw({ host, port: to }, method, path, headers, body);

/** Every job the queue holds, in any state. */
async function jobCount(): Promise<number> {
  const c = await api.producer.queue.getJobCounts();
  return Object.values(c).reduce((a, b) => a + b, 0);
}

const valid = {
  request: {
    model: 'claude-test',
    max_tokens: 50,
    messages: [{ role: 'user', content: 'Hello' }],
  },
};

/** A valid body with one part replaced by something random. */
const mutatedBody = mutatedJson(valid, [
  'request',
  'request.model',
  'request.max_tokens',
  'request.messages',
  'priority',
  'idempotency_key',
  'stream',
  'meta',
  'extra',
  'request.messages.0.role',
  'request.messages.0.content',
]);

const body = fc.oneof(
  mutatedBody,
  fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify(v)),
  fc.string({ maxLength: 200 }),
  fc.constantFrom(
    '',
    '{',
    '{"request":',
    'null',
    '[]',
    '{"request":{}}',
    '\u0000',
    'x'.repeat(9_000),
  ),
  fc.constant(JSON.stringify(valid)),
);

const path = fc.oneof(
  fc.constantFrom(
    '/v1/jobs',
    '/v1/jobs/',
    '//v1/jobs',
    '/v1//jobs',
    '/v1/jobs/..',
    '/v1/jobs/%2e%2e',
    '/v1/jobs/..%2f..%2fopenapi.json',
    '/v1%2fjobs',
    '/v1/jobs/abc/wait?timeout=0',
    '/v1/jobs/abc/wait?timeout=-1',
    '/v1/jobs/abc/wait?timeout=1e309',
    '/v1/jobs/abc/wait?timeout=0&timeout=1',
    '/openapi.json',
    '/openapi.json/../v1/jobs',
    '/V1/JOBS',
    '/v1/jobs?x=%zz',
    '/%',
    '/v1/jobs/%00',
  ),
  fc
    .string({ unit: 'grapheme-ascii', maxLength: 40 })
    .map((s) => `/v1/jobs/${encodeURIComponent(s)}`),
  fc
    .string({ unit: 'grapheme-ascii', maxLength: 20 })
    .map((s) => `/v1/jobs/${encodeURIComponent(s)}/wait?timeout=${encodeURIComponent(s)}`),
);

const authorization = fc.oneof(
  fc.constant(`Bearer ${ACME_KEY}`),
  fc.constant(`bearer ${BETA_KEY}`),
  fc.constantFrom(
    'Bearer',
    'Bearer ',
    `Bearer ${ACME_KEY} extra`,
    `Basic ${Buffer.from(`acme:${ACME_KEY}`).toString('base64')}`,
    `Bearer ${ACME_KEY}x`,
    `Bearer ${'k'.repeat(600)}`,
    `${ACME_KEY}`,
  ),
  fc.string({ unit: 'grapheme-ascii', maxLength: 80 }).map((s) => s.replace(/[\r\n]/g, '')),
);

const contentType = fc.constantFrom(
  'application/json',
  'application/json; charset=utf-8',
  'APPLICATION/JSON',
  'application/json; charset=latin1',
  'text/plain',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=x',
  'application/jsonx',
  'application/vnd.api+json',
  '',
);

const fuzzRequest = fc.record(
  {
    method: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD'),
    path,
    authorization,
    xApiKey: fc.constantFrom(ACME_KEY, 'nope', ''),
    contentType,
    body,
  },
  { requiredKeys: ['method', 'path'] },
);

const decodes = (p: string) => {
  try {
    decodeURIComponent(p.split('?')[0]!);
    return true;
  } catch {
    return false;
  }
};
const VALID = /^(sk-acme-fuzz-0123456789|sk-beta-fuzz-9876543210)$/;
/**
 * Whether a request presents a valid key: as `Authorization: Bearer` or `x-api-key` (an empty one
 * is none), and both only when they carry the same key.
 */
const authed = (r: { authorization?: string | undefined; xApiKey?: string | undefined }) => {
  const bearer = /^bearer[ ]+(\S{1,512})\s*$/i.exec(r.authorization ?? '')?.[1];
  const x = r.xApiKey === '' ? undefined : r.xApiKey;
  if (bearer !== undefined && x !== undefined && bearer !== x) return false;
  return VALID.test(x ?? bearer ?? '');
};

describe('HTTP API under fuzzing', () => {
  it('never answers 5xx, always with a stable code, and enqueues nothing behind a 4xx', async () => {
    await fc.assert(
      fc.asyncProperty(fuzzRequest, async (r) => {
        const headers: Record<string, string> = {};
        if (r.authorization !== undefined) headers['authorization'] = r.authorization;
        if (r.xApiKey !== undefined) headers['x-api-key'] = r.xApiKey;
        if (r.contentType !== undefined && r.contentType !== '')
          headers['content-type'] = r.contentType;
        const before = await jobCount();
        const res = await send(r.method, r.path, headers, r.body);
        const after = await jobCount();
        expect(res.status, `${r.method} ${r.path}`).toBeGreaterThanOrEqual(200);
        expect(res.status, `${r.method} ${r.path}: ${res.text}`).toBeLessThan(500);
        expect(res.text).not.toContain(ACME_KEY);
        if (res.status >= 400) {
          expect(after, `a ${res.status} left a job behind`).toBe(before);
          if (r.method !== 'HEAD') {
            const code = JSON.parse(res.text).error?.code;
            expect(CODES.has(code), `${res.status} with code ${code}`).toBe(true);
          }
        } else {
          expect(after - before).toBeLessThanOrEqual(1);
        }
        // Without a valid key nothing but the public document answers anything but 401
        // (a URL that does not decode is refused before anything looks at it).
        if (!decodes(r.path)) {
          expect(res.status).toBe(400);
        } else if (!authed(r) && r.path !== '/openapi.json') {
          expect(res.status, `${r.method} ${r.path}`).toBe(401);
        }
      }),
      { numRuns: 250, seed: Number(process.env['LLMQ_FUZZ_SEED'] ?? Date.now() % 1e9) },
    );
    // The server is still whole.
    const ok = await send(
      'POST',
      '/v1/jobs',
      {
        authorization: `Bearer ${ACME_KEY}`,
        'content-type': 'application/json',
      },
      JSON.stringify(valid),
    );
    expect(ok.status).toBe(202);
  });

  it('checks credentials before the body: no key and no JSON is 401, not 415 or 413', async () => {
    for (const [type, text] of [
      ['text/plain', 'hello'],
      ['application/json', 'x'.repeat(20_000)],
      ['application/json', '{'],
    ] as const) {
      const res = await send('POST', '/v1/jobs', { 'content-type': type }, text);
      expect(res.status).toBe(401);
      expect(JSON.parse(res.text).error.code).toBe('unauthorized');
    }
    // Unknown paths too: a caller without a key cannot tell which routes exist.
    for (const p of ['/v1/nothing', '//v1/jobs', '/admin']) {
      expect((await send('GET', p, {})).status).toBe(401);
    }
    // With a key, the same requests get the specific answers.
    const key = { authorization: `Bearer ${ACME_KEY}` };
    expect(
      (await send('POST', '/v1/jobs', { ...key, 'content-type': 'text/plain' }, 'hi')).status,
    ).toBe(415);
    expect((await send('GET', '/v1/nothing', key)).status).toBe(404);
  });

  it('answers oversized and duplicated credentials with a stable code', async () => {
    const big = await send('GET', '/v1/jobs/x', { authorization: `Bearer ${'k'.repeat(40_000)}` });
    expect(big.status).toBe(431);
    expect(JSON.parse(big.text).error.code).toBe('headers_too_large');
    const long = await send('GET', '/v1/jobs/x', { authorization: `Bearer ${'k'.repeat(2_000)}` });
    expect(long.status).toBe(401);
    // Two Authorization headers: Node keeps the first, so a valid key second does not get in.
    const twice = await new Promise<number>((resolve, reject) => {
      const req = httpRequest(
        { host, port, method: 'GET', path: '/v1/jobs/x', agent: false },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      req.setHeader('authorization', ['Bearer wrong', `Bearer ${ACME_KEY}`]);
      req.on('error', reject);
      req.end();
    });
    expect(twice).toBe(401);
    // x-api-key, as the Anthropic SDK sends it, authenticates as Bearer does.
    expect((await send('GET', '/v1/jobs/x', { 'x-api-key': ACME_KEY })).status).toBe(404);
    expect((await send('GET', '/v1/jobs/x', { 'x-api-key': 'nope' })).status).toBe(401);
  });

  it("never shows, waits on or cancels another tenant's job", async () => {
    const created = await send(
      'POST',
      '/v1/jobs',
      { authorization: `Bearer ${BETA_KEY}`, 'content-type': 'application/json' },
      JSON.stringify(valid),
    );
    const id = JSON.parse(created.text).id as string;
    const acme = { authorization: `Bearer ${ACME_KEY}` };
    for (const [method, p] of [
      ['GET', `/v1/jobs/${id}`],
      ['GET', `/v1/jobs/${id}/wait?timeout=0`],
      ['DELETE', `/v1/jobs/${id}`],
      ['GET', `/v1/jobs/${encodeURIComponent(id)}`],
    ] as const) {
      const res = await send(method, p, acme);
      expect(res.status).toBe(404);
      expect(JSON.parse(res.text).error.code).toBe('job_not_found');
    }
    expect(await api.producer.queue.getJob(id)).toBeDefined();
  });

  it('refuses an address after repeated failed keys for a growing time, and logs it without the key', async () => {
    // A prefix of its own: the count is shared by every server of a prefix.
    const own = testNames('fuzzauth');
    const throttled = await start(3, own);
    const p = Number(new URL(throttled.url).port);
    try {
      // Requests without credentials are not guesses: they get 401, and do not count.
      for (let i = 0; i < 3; i++)
        expect((await send('GET', '/v1/jobs/x', {}, undefined, p)).status).toBe(401);
      const wrong = 'sk-guess-DO-NOT-LOG-4242';
      const codes: number[] = [];
      for (let i = 0; i < 5; i++) {
        codes.push(
          (await send('GET', '/v1/jobs/x', { authorization: `Bearer ${wrong}` }, undefined, p))
            .status,
        );
      }
      expect(codes).toEqual([401, 401, 401, 429, 429]);
      // Refused whatever it sends now, the right key too: a 200 would tell a guess was right.
      const right = await send(
        'GET',
        '/v1/jobs/x',
        { authorization: `Bearer ${ACME_KEY}` },
        undefined,
        p,
      );
      expect(right.status).toBe(429);
      expect(JSON.parse(right.text).error.code).toBe('too_many_auth_failures');
      expect(Number(right.headers['retry-after'])).toBeGreaterThan(0);
      expect(logged.some((l) => l.includes('127.0.0.1'))).toBe(true);
      expect(logged.join('\n')).not.toContain(wrong);
    } finally {
      await throttled.close();
      await deleteKeys(redis, own.prefix);
    }
  });
});
