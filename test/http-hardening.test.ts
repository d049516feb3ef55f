import { describe, expect, it } from 'vitest';
import { hashApiKey } from '../producer/http/api-keys.ts';
import { Producer } from '../producer/producer.ts';
import { RequestValidationError } from '../shared/errors.ts';
import { API_VERSION } from './fixtures/gateway.ts';
import { jobCount, postJson, serveForFile } from './fixtures/http-api.ts';

const ACME = 'sk-harden-acme-0123456789';
const BETA = 'sk-harden-beta-0123456789';
const GAMMA = 'sk-harden-gamma-0123456789';
// acme may wait 2 jobs, never asks more urgent than `default`; beta may wait 3 KB of requests.
const KEYS = [
  `acme:${hashApiKey(ACME)}:default max-waiting=2 max-priority=default`,
  `beta:${hashApiKey(BETA)} max-bytes=3kb`,
  `gamma:${hashApiKey(GAMMA)} count-tokens-rpm=1`,
].join('\n');

const served = serveForFile('harden', {
  mock: true,
  apiKeys: KEYS,
  // Three tenants share 6 count_tokens calls a minute: 2 each, unless the keys file says.
  gateway: { countTokensRpm: 6 },
});

const message = (text = 'Say hi.') => ({
  model: 'claude-test',
  max_tokens: 50,
  messages: [{ role: 'user', content: text }],
});

/** `{"a":{"a":…1…}}`, `depth` objects deep. */
const nested = (depth: number) => `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`;

const post = (path: string, body: string, headers: Record<string, string>) =>
  postJson(served.api, path, body, headers);
const job = (body: unknown, key = ACME) =>
  post('/v1/jobs', JSON.stringify(body), { authorization: `Bearer ${key}` });
const gateway = (body: unknown, headers: Record<string, string> = {}, key = ACME) =>
  post('/v1/messages', JSON.stringify(body), { 'x-api-key': key, ...API_VERSION, ...headers });

describe('input bounds', () => {
  it('a body nested 10,000 deep is a 400 naming the field on every route, and adds nothing', async () => {
    const deep = `{"request":{"model":"claude-test","max_tokens":5,"metadata":${nested(10_000)},"messages":[{"role":"user","content":"hi"}]}}`;
    const before = await jobCount(served.api);
    const viaJobs = await post('/v1/jobs', deep, { authorization: `Bearer ${ACME}` });
    expect(viaJobs.status).toBe(400);
    expect(viaJobs.body.error).toMatchObject({
      code: 'invalid_request',
      field: expect.stringMatching(/^request\.metadata\.a\.a/),
    });
    expect(viaJobs.body.error.message).toMatch(/nested more than 64 levels deep/);
    for (const path of ['/v1/messages', '/v1/messages/count_tokens']) {
      const res = await post(path, nested(10_000), { 'x-api-key': ACME, ...API_VERSION });
      expect(res.status, path).toBe(400);
      expect(res.body.error).toMatchObject({ type: 'invalid_request_error' });
      expect(res.body.error.message).toMatch(/^a\.a\.a.*nested more than 64 levels deep/);
    }
    expect(await jobCount(served.api)).toBe(before);
  });

  it('the library refuses a request nested too deep before it recurses into it', () => {
    const producer = new Producer({ redis: served.redis, names: served.names });
    const request = { ...message(), metadata: JSON.parse(nested(10_000)) };
    expect(() => producer.prepare(request)).toThrow(RequestValidationError);
    expect(() => producer.prepare(request)).toThrow(/metadata\.a\.a.*nested more than 64/);
  });
});

describe('idempotency keys', () => {
  it('keys with lone surrogates are refused with a 400 that says so, never mapped to one job', async () => {
    const before = await jobCount(served.api);
    for (const key of ['k\ud800', 'k\udbff']) {
      const res = await job({ request: message(), idempotency_key: key });
      expect(res.status).toBe(400);
      expect(res.body.error).toMatchObject({ code: 'invalid_request', field: 'idempotency_key' });
      expect(res.body.error.message).toMatch(/lone surrogate \(\\ud[8b][0f]{2}/);
    }
    // U+FFFD too: it is what invalid UTF-8 in a body decodes to (test/idempotency-conflicts).
    const replaced = await job({ request: message(), idempotency_key: 'k\uFFFD' });
    expect(replaced.status).toBe(400);
    expect(replaced.body.error.message).toMatch(/must be valid UTF-8 without U\+FFFD/);
    expect(await jobCount(served.api)).toBe(before);
  });
});

describe('credentials', () => {
  it('two different keys in one request are refused on both APIs, saying so', async () => {
    const both = { authorization: `Bearer ${ACME}`, 'x-api-key': BETA };
    const viaJobs = await post('/v1/jobs', JSON.stringify({ request: message() }), both);
    expect(viaJobs.status).toBe(401);
    expect(viaJobs.body.error.code).toBe('conflicting_credentials');
    const viaGateway = await post('/v1/messages', JSON.stringify(message()), both);
    expect(viaGateway.status).toBe(401);
    expect(viaGateway.body.error).toMatchObject({
      type: 'authentication_error',
      message: expect.stringMatching(/two different keys/),
    });
    // The same key twice is one credential.
    const same = { authorization: `Bearer ${ACME}`, 'x-api-key': ACME };
    expect((await post('/v1/jobs', JSON.stringify({ request: message() }), same)).status).toBe(202);
    await served.api.producer.queue.obliterate({ force: true });
  });
});

describe('per-tenant limits from the keys file', () => {
  it("a tenant's bound on waiting jobs refuses it alone: the others still get in", async () => {
    expect((await job({ request: message('1') })).status).toBe(202);
    expect((await job({ request: message('2') })).status).toBe(202);
    const third = await job({ request: message('3') });
    expect(third.status).toBe(429);
    expect(third.body.error.code).toBe('queue_full');
    expect(third.body.error.message).toMatch(/tenant "acme" .*is full \(2 waiting, bound 2\)/);
    expect(third.headers.get('retry-after')).toBe('1');
    expect((await job({ request: message('from beta') }, BETA)).status).toBe(202);
    await served.api.producer.queue.obliterate({ force: true });
  });

  it("a tenant's bound on waiting bytes refuses it with 429 and leaves nothing behind", async () => {
    const big = (i: number) => message(`${i} ${'x'.repeat(900)}`);
    expect((await job({ request: big(1) }, BETA)).status).toBe(202);
    expect((await job({ request: big(2) }, BETA)).status).toBe(202);
    const before = await jobCount(served.api);
    const full = await job({ request: big(3) }, BETA);
    expect(full.status).toBe(429);
    expect(full.body.error.message).toMatch(
      /tenant "beta" .*is full \(.* KB of requests waiting, bound 3 KB\)/,
    );
    expect(await jobCount(served.api)).toBe(before);
    // A request that could never fit under the bound is a 400, not a retry forever.
    const huge = await job({ request: message('y'.repeat(5_000)) }, BETA);
    expect(huge.status).toBe(400);
    expect(huge.body.error).toMatchObject({ code: 'invalid_request', field: 'request' });
    expect(huge.body.error.message).toMatch(/more than tenant "beta" .* holds at once/);
    await served.api.producer.queue.obliterate({ force: true });
  });

  it('a key asking more urgent than its max-priority is refused with 403, on both APIs', async () => {
    const urgent = await job({ request: message(), priority: 'interactive' });
    expect(urgent.status).toBe(403);
    expect(urgent.body.error).toMatchObject({ code: 'priority_not_allowed', field: 'priority' });
    expect(urgent.body.error.message).toMatch(/priority 10 is more urgent .*max-priority is 100/);
    const viaGateway = await gateway(message(), { 'llmq-priority': '1' });
    expect(viaGateway.status).toBe(403);
    expect(viaGateway.body.error.type).toBe('permission_error');
    // At or below its max it is taken as asked.
    const ok = await job({ request: message(), priority: 'batch' });
    expect(ok.status).toBe(202);
    expect((await served.api.producer.queue.getJob(ok.body.id))?.data.priority).toBe(1_000);
    await served.api.producer.queue.obliterate({ force: true });
  });

  it("count_tokens budgets are per tenant: one tenant's calls do not spend another's", async () => {
    const count = (key: string) =>
      post(
        '/v1/messages/count_tokens',
        JSON.stringify({ model: 'claude-test', messages: message().messages }),
        { 'x-api-key': key, ...API_VERSION },
      );
    expect((await count(ACME)).status).toBe(200);
    expect((await count(ACME)).status).toBe(200);
    const spent = await count(ACME);
    expect(spent.status).toBe(429);
    expect(spent.body.error.message).toMatch(/2 requests per minute for tenant "acme"/);
    expect(Number(spent.headers.get('retry-after'))).toBeGreaterThan(0);
    // beta has its own share; gamma its own number from the keys file.
    expect((await count(BETA)).status).toBe(200);
    expect((await count(GAMMA)).status).toBe(200);
    expect((await count(GAMMA)).body.error.message).toMatch(
      /1 requests per minute for tenant "gamma"/,
    );
  });
});
