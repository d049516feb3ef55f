import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HttpApi } from '../producer/http/server.ts';
import { breakerKey } from '../shared/keys.ts';
import { sdkFor, startGateway, TENANT_KEYS } from './fixtures/gateway.ts';
import {
  openPool,
  type Pool,
  request as plainRequest,
  type RecordingProxy,
  startRecordingProxy,
} from './fixtures/worker-harness.ts';

const request = (...a: Parameters<typeof plainRequest>) =>
  plainRequest(...a) as Anthropic.MessageCreateParamsNonStreaming;

import { until } from './helpers.ts';

let pool: Pool;
let proxy: RecordingProxy;
let api: HttpApi;

beforeAll(async () => {
  pool = await openPool('gw', { latencyMs: 5 });
  proxy = await startRecordingProxy(pool.mock.url);
  await pool.worker({ baseURL: proxy.url, concurrency: 4 });
  api = await startGateway(pool, {}, { bodyLimit: 20_000 });
});
afterAll(async () => {
  await api?.close();
  await proxy?.close();
  await pool?.cleanup();
});

/** A POST with the headers every SDK sends (JSON, `anthropic-version`), then `headers`. */
const post = (path: string, body: string, headers: Record<string, string> = {}, to = api) =>
  fetch(`${to.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', ...headers },
    body,
  });

describe('the SDK pointed at llmq serve', () => {
  it('messages.create answers the Message the provider sent, with its request-id and the job id', async () => {
    const { data, response } = await sdkFor(api)
      .messages.create(request('Say hello to the gateway.', 40), {
        headers: { 'anthropic-beta': 'test-beta-2025-01-01' },
      })
      .withResponse();
    const jobId = response.headers.get('llmq-job-id')!;
    const job = await pool.job(jobId);
    expect(job?.returnvalue.message.content).toEqual(data.content);
    expect(data).toMatchObject({ type: 'message', role: 'assistant', model: 'claude-test-1' });
    expect(data.usage.output_tokens).toBeGreaterThan(0);
    expect(response.headers.get('request-id')).toBe(job?.returnvalue.requestId);
    // The job runs as the tenant, at its default lane, and holds no caller key.
    expect(job?.data).toMatchObject({ tenant: 'acme', priority: 10 });
    expect(JSON.stringify(job?.data)).not.toContain(TENANT_KEYS.acme);
    // The beta header reached the provider; the caller's key did not.
    const sent = proxy.calls.at(-1)?.headers;
    expect(sent?.['anthropic-beta']).toBe('test-beta-2025-01-01');
    expect(JSON.stringify(sent)).not.toContain(TENANT_KEYS.acme);
  });

  it('messages.stream() relays the provider events: text and finalMessage equal the stored result', async () => {
    const stream = sdkFor(api).messages.stream(request('Stream a few words.', 60));
    let text = '';
    let deltas = 0;
    stream.on('text', (delta) => {
      text += delta;
      deltas++;
    });
    const { response } = await stream.withResponse();
    const final = await stream.finalMessage();
    // The stream ends as the worker stores the result: wait for it.
    const jobId = response.headers.get('llmq-job-id')!;
    await until(async () => (await pool.queue.getJobState(jobId)) === 'completed');
    const job = await pool.job(jobId);
    const stored = job!.returnvalue.message;
    expect(final.content).toEqual(stored.content);
    expect(text).toBe((stored.content[0] as { text: string }).text);
    // The provider's deltas one by one, as it sent them (a replay of the result would be one).
    expect(deltas).toBeGreaterThan(5);
    expect(final.usage.output_tokens).toBe(stored.usage.output_tokens);
    expect(final.stop_reason).toBe(stored.stop_reason);
    expect(response.headers.get('content-type')).toContain('text/event-stream');
    expect(response.headers.get('request-id')).toBe(job!.returnvalue.requestId);
  });

  it('a stream cut by the provider ends with its error event', async () => {
    pool.mock.setFaults({ midStreamError: 1 });
    let jobId = '';
    try {
      const stream = sdkFor(api).messages.stream(request('This stream breaks.', 200));
      jobId = (await stream.withResponse()).response.headers.get('llmq-job-id') ?? '';
      const err = await stream.finalMessage().then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(Anthropic.APIError);
      expect((err as InstanceType<typeof Anthropic.APIError>).status).toBeUndefined();
      expect((err as InstanceType<typeof Anthropic.APIError>).type).toBe('overloaded_error');
    } finally {
      pool.mock.setFaults({});
    }
    // The job goes on: its retry completes (and closes the breaker its failure counted toward).
    await until(async () => (await pool.queue.getJobState(jobId)) === 'completed', 30_000);
  });

  it('countTokens is forwarded to the provider with the workers key', async () => {
    const params = {
      model: 'claude-test-1',
      messages: [{ role: 'user' as const, content: 'Count these words.' }],
    };
    const before = pool.mock.stats().countTokensCalls;
    const counted = await sdkFor(api).messages.countTokens(params);
    const direct = await new Anthropic({
      apiKey: 'direct',
      baseURL: pool.mock.url,
    }).messages.countTokens(params);
    expect(counted).toEqual(direct);
    expect(pool.mock.stats().countTokensCalls).toBe(before + 2);
  });

  it('a request the provider refuses for good answers with its status and error', async () => {
    const err = await sdkFor(api)
      .messages.create(request('Unknown model.', 20, 'gpt-nope'))
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.NotFoundError);
    expect((err as InstanceType<typeof Anthropic.NotFoundError>).error).toMatchObject({
      type: 'error',
      error: { type: 'not_found_error', message: 'model: gpt-nope' },
    });
  });

  it('an open breaker answers 529 with retry-after, and nothing is queued', async () => {
    const key = breakerKey(pool.names);
    await pool.redis.hset(key, 'state', 'open', 'open_until', Date.now() + 30_000);
    try {
      const before = (await pool.counts()).wait;
      const err = await sdkFor(api)
        .messages.create(request())
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(Anthropic.InternalServerError);
      const e = err as InstanceType<typeof Anthropic.InternalServerError>;
      expect(e.status).toBe(529);
      expect(e.type).toBe('overloaded_error');
      expect(Number(e.headers?.get('retry-after'))).toBeGreaterThan(0);
      expect((await pool.counts()).wait).toBe(before);
    } finally {
      await pool.redis.del(key);
    }
  });
});

describe('bad input gets the API error and enqueues nothing', () => {
  const jobIds = async () =>
    (
      await pool.queue.getJobs(['wait', 'prioritized', 'active', 'delayed', 'completed', 'failed'])
    ).map((j) => j.id);
  async function nothingQueued<T>(run: () => Promise<T>): Promise<T> {
    const before = await jobIds();
    const out = await run();
    expect((await jobIds()).filter((id) => !before.includes(id))).toEqual([]);
    return out;
  }

  it('a wrong key is an AuthenticationError; a missing or malformed one too', async () => {
    const err = await nothingQueued(() =>
      sdkFor(api, 'sk-not-a-tenant')
        .messages.create(request())
        .catch((e: unknown) => e),
    );
    expect(err).toBeInstanceOf(Anthropic.AuthenticationError);
    expect((err as InstanceType<typeof Anthropic.AuthenticationError>).type).toBe(
      'authentication_error',
    );
    for (const headers of [{}, { authorization: 'Basic abc' }, { 'x-api-key': '' }] as Record<
      string,
      string
    >[]) {
      const res = await nothingQueued(() =>
        post('/v1/messages', JSON.stringify(request()), headers),
      );
      expect(res.status).toBe(401);
      expect(await res.json()).toMatchObject({
        type: 'error',
        error: { type: 'authentication_error' },
      });
    }
    // A bearer tenant key works like x-api-key.
    const ok = await post('/v1/messages', JSON.stringify(request('Bearer works.', 10)), {
      authorization: `Bearer ${TENANT_KEYS.beta}`,
    });
    expect(ok.status).toBe(200);
  });

  it('unknown fields, bad values and bad headers are BadRequestErrors naming the field', async () => {
    const cases: [object, Record<string, string>, RegExp][] = [
      [{ ...request(), colour: 'blue' }, {}, /^colour: Extra inputs are not permitted/],
      [{ ...request(), max_tokens: 0 }, {}, /^max_tokens: /],
      [{ ...request(), messages: [] }, {}, /^messages: /],
      [request(), { 'llmq-priority': 'urgent' }, /^llmq-priority: .*"urgent"/],
      [request(), { 'idempotency-key': 'x'.repeat(1_000) }, /^idempotency-key: /],
    ];
    for (const [body, headers, message] of cases) {
      const err = await nothingQueued(() =>
        sdkFor(api)
          .messages.create(body as never, { headers })
          .catch((e: unknown) => e),
      );
      expect(err).toBeInstanceOf(Anthropic.BadRequestError);
      const e = err as InstanceType<typeof Anthropic.BadRequestError>;
      expect(e.type).toBe('invalid_request_error');
      expect((e.error as { error: { message: string } }).error.message).toMatch(message);
    }
  });

  it("a request without anthropic-version gets the API's 400, on every route", async () => {
    for (const [method, path] of [
      ['POST', '/v1/messages'],
      ['POST', '/v1/messages/count_tokens'],
      ['GET', '/v1/models'],
    ] as const) {
      const res = await nothingQueued(() =>
        fetch(`${api.url}${path}`, {
          method,
          headers: { 'content-type': 'application/json', 'x-api-key': TENANT_KEYS.acme },
          ...(method === 'POST' ? { body: JSON.stringify(request()) } : {}),
        }),
      );
      expect(res.status, path).toBe(400);
      expect(await res.json()).toEqual({
        type: 'error',
        error: { type: 'invalid_request_error', message: 'anthropic-version: header is required' },
        request_id: res.headers.get('request-id'),
      });
    }
    // A wrong key is still refused first, as the API does.
    const unknown = await post('/v1/messages', JSON.stringify(request()), {
      'x-api-key': 'sk-not-a-tenant',
      'anthropic-version': '',
    });
    expect(unknown.status).toBe(401);
  });

  it("a body's missing or mistyped fields are said in the API's words", async () => {
    const { messages: _m, ...noMessages } = request();
    const { max_tokens: _t, ...noMaxTokens } = request();
    const cases: [object, string][] = [
      [noMessages, 'messages: Field required'],
      [noMaxTokens, 'max_tokens: Field required'],
      [{ ...request(), max_tokens: 'ten' }, 'max_tokens: Input should be a valid integer'],
      [{ ...request(), messages: 'Hi' }, 'messages: Input should be a valid list'],
      [{ ...request(), messages: [] }, 'messages: at least one message is required'],
      [
        { ...request(), messages: [{ role: 'system', content: 'Hi' }] },
        "messages.0.role: Input should be 'user' or 'assistant'",
      ],
      [{ ...request(), messages: [{ role: 'user' }] }, 'messages.0.content: Field required'],
      [{ ...request(), model: 7 }, 'model: Input should be a valid string'],
      [{ ...request(), temperature: 3 }, 'temperature: Input should be less than or equal to 1'],
    ];
    for (const [body, message] of cases) {
      const res = await nothingQueued(() =>
        post('/v1/messages', JSON.stringify(body), { 'x-api-key': TENANT_KEYS.acme }),
      );
      expect(res.status, message).toBe(400);
      expect(await res.json()).toMatchObject({
        type: 'error',
        error: { type: 'invalid_request_error', message },
      });
    }
  });

  it('malformed JSON is a 400 and an oversized body a 413 request_too_large', async () => {
    const auth = { 'x-api-key': TENANT_KEYS.acme };
    const bad = await nothingQueued(() => post('/v1/messages', '{"model": ', auth));
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: { type: 'invalid_request_error' } });
    const err = await nothingQueued(() =>
      sdkFor(api)
        .messages.create(request('x '.repeat(20_000)))
        .catch((e: unknown) => e),
    );
    expect(err).toBeInstanceOf(Anthropic.APIError);
    expect((err as InstanceType<typeof Anthropic.APIError>).status).toBe(413);
    expect((err as InstanceType<typeof Anthropic.APIError>).type).toBe('request_too_large');
  });
});

describe('a gateway with no worker taking jobs', () => {
  let idle: Pool;
  let idleApi: HttpApi;
  beforeAll(async () => {
    idle = await openPool('gwidle');
    idleApi = await startGateway(
      idle,
      { maxDepth: '2' },
      { maxWaitMs: 1_500, gateway: { pingMs: 200 } },
    );
  });
  afterAll(async () => {
    await idleApi?.close();
    await idle?.cleanup();
  });

  it('a call not started within --max-wait is cancelled and answered 529', async () => {
    const err = await sdkFor(idleApi)
      .messages.create(request())
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.InternalServerError);
    const e = err as InstanceType<typeof Anthropic.InternalServerError>;
    expect([e.status, e.type]).toEqual([529, 'overloaded_error']);
    expect(e.headers?.get('retry-after')).toBeTruthy();
    const c = await idle.counts();
    expect(c.wait + c.prioritized).toBe(0);
    expect(idle.mock.stats().attempts).toBe(0);
  });

  it('a streamed call that waits gets pings, then the 529 as an error event', async () => {
    const res = await post(
      '/v1/messages',
      JSON.stringify({ ...request(), stream: true }),
      { 'x-api-key': TENANT_KEYS.acme },
      idleApi,
    );
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toMatch(/^event: ping\ndata: \{"type": "ping"\}\n\n/);
    expect(text).toMatch(
      /event: error\ndata: \{"type":"error","error":\{"type":"overloaded_error"/,
    );
  });

  it('a client that aborts while its job waits removes the job; the provider sees nothing', async () => {
    const abort = new AbortController();
    const call = sdkFor(idleApi).messages.create(request('Never sent.'), { signal: abort.signal });
    call.catch(() => {});
    await until(async () => {
      const c = await idle.counts();
      return c.wait + c.prioritized === 1;
    });
    abort.abort();
    await expect(call).rejects.toBeInstanceOf(Anthropic.APIUserAbortError);
    await until(async () => {
      const c = await idle.counts();
      return c.wait + c.prioritized === 0;
    });
    expect(idle.mock.stats().attempts).toBe(0);
  });

  it('a full queue is a RateLimitError with retry-after', async () => {
    await idle.producer.enqueue(request('one'));
    await idle.producer.enqueue(request('two'));
    try {
      const err = await sdkFor(idleApi)
        .messages.create(request())
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(Anthropic.RateLimitError);
      const e = err as InstanceType<typeof Anthropic.RateLimitError>;
      expect(e.type).toBe('rate_limit_error');
      expect(Number(e.headers?.get('retry-after'))).toBeGreaterThanOrEqual(1);
    } finally {
      await idle.queue.obliterate({ force: true });
    }
  });
});

describe('a caller that leaves after its call started', () => {
  let slow: Pool;
  let slowApi: HttpApi;
  beforeAll(async () => {
    slow = await openPool('gwslow', { latencyMs: 1_500 });
    await slow.worker({ concurrency: 2 });
    slowApi = await startGateway(slow);
  });
  afterAll(async () => {
    await slowApi?.close();
    await slow?.cleanup();
  });

  it('does not cancel it: the call completes and its result stays in the job', async () => {
    const abort = new AbortController();
    const call = sdkFor(slowApi).messages.create(request('Finish without me.'), {
      signal: abort.signal,
    });
    call.catch(() => {});
    // The provider has the request: the job is active and its call under way.
    await until(() => slow.mock.stats().attempts === 1);
    const [active] = await slow.queue.getJobs(['active']);
    expect(active).toBeDefined();
    abort.abort();
    await expect(call).rejects.toBeInstanceOf(Anthropic.APIUserAbortError);
    await until(async () => (await slow.job(active!.id!))?.finishedOn !== undefined);
    const job = await slow.job(active!.id!);
    expect(await job?.getState()).toBe('completed');
    expect(job?.returnvalue.message.content.length).toBeGreaterThan(0);
    expect(slow.mock.stats().attempts).toBe(1);
  });
});
