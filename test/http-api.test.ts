import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { beforeEach, describe, expect, it } from 'vitest';
import { hashApiKey } from '../producer/http/api-keys.ts';
import { startHttpApi } from '../producer/http/server.ts';
import { resolveConfig } from '../shared/config.ts';
import { startFakeWorker } from './fixtures/fake-worker.ts';
import { serveForFile } from './fixtures/http-api.ts';
import { REDIS_URL, tsxEval, until } from './helpers.ts';

const ACME_KEY = 'sk-acme-0123456789-secret';
const BETA_KEY = 'sk-beta-9876543210-secret';
const API_KEYS = `acme:${hashApiKey(ACME_KEY)},beta:${hashApiKey(BETA_KEY)}`;

const served = serveForFile('http', {
  flags: { maxDepth: '4', otpm: '1000' },
  apiKeys: API_KEYS,
  bodyLimit: 20_000,
  maxWaitMs: 10_000,
});
beforeEach(async () => {
  // Each test starts with an empty queue (the bound is 4).
  await served.api.producer.queue.obliterate({ force: true });
});

const message = (text = 'Say hi.', maxTokens = 100) => ({
  model: 'claude-test',
  max_tokens: maxTokens,
  messages: [{ role: 'user', content: text }],
});

interface Answer {
  status: number;
  headers: Headers;
  // biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by tests
  body: Record<string, any>;
}

async function call(
  method: string,
  path: string,
  o: {
    key?: string | null;
    body?: unknown;
    raw?: string;
    type?: string;
    /** How the key is sent. @default 'bearer' */
    as?: 'bearer' | 'x-api-key';
  } = {},
): Promise<Answer> {
  const headers: Record<string, string> = {};
  const key = o.key === undefined ? ACME_KEY : o.key;
  if (key !== null && o.as === 'x-api-key') headers['x-api-key'] = key;
  else if (key !== null) headers['authorization'] = `Bearer ${key}`;
  let body: string | undefined;
  if (o.raw !== undefined || o.body !== undefined) {
    headers['content-type'] = o.type ?? 'application/json';
    body = o.raw ?? JSON.stringify(o.body);
  }
  const res = await fetch(`${served.api.url}${path}`, {
    method,
    headers,
    ...(body !== undefined ? { body } : {}),
  });
  const text = await res.text();
  expect(text).not.toContain(ACME_KEY);
  expect(text).not.toContain(BETA_KEY);
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : {} };
}

const post = (body: unknown, key?: string | null) =>
  call('POST', '/v1/jobs', { body, ...(key !== undefined ? { key } : {}) });

/** A stand-in for llmq's worker: holds "hold" jobs until released, dead-letters "fail" jobs, echoes the rest. */
function startEchoWorker() {
  let release: () => void = () => {};
  const held = new Promise<void>((r) => (release = r));
  const w = startFakeWorker(served.redis, served.names, async (prompt) => {
    if (prompt === 'hold') await held;
    return prompt === 'fail'
      ? {
          deadLetter: {
            reason: '429 rate_limit_error without retry-after: spend cap reached',
            errorClass: 'RateLimitError',
            status: 429,
          },
        }
      : { text: `echo: ${prompt}`, usage: { input_tokens: 12, output_tokens: 4 } };
  });
  return {
    worker: w.worker,
    release,
    close: async () => {
      release();
      await w.close();
    },
  };
}

describe('HTTP API: auth', () => {
  it('answers 401 without a key or with an unknown one, and never echoes the key', async () => {
    const none = await post({ request: message() }, null);
    expect(none.status).toBe(401);
    expect(none.body).toEqual({
      error: { code: 'unauthorized', message: expect.any(String) },
      request_id: expect.stringMatching(/^req_llmq_/),
    });
    expect(none.headers.get('www-authenticate')).toBe('Bearer');
    const wrong = await post({ request: message() }, `${ACME_KEY}x`);
    expect(wrong.status).toBe(401);
    expect((await call('GET', '/v1/jobs/abc', { key: 'nope' })).status).toBe(401);
    expect((await call('GET', '/v1/jobs/abc', { key: null })).status).toBe(401);
  });

  it('takes the key as x-api-key, as the Anthropic SDK sends it, on every route; a wrong one is 401 naming both headers', async () => {
    const sent = await call('POST', '/v1/jobs', { body: { request: message() }, as: 'x-api-key' });
    expect(sent.status).toBe(202);
    const got = await call('GET', `/v1/jobs/${sent.body.id}`, { as: 'x-api-key' });
    expect(got.status).toBe(200);
    expect(got.body.id).toBe(sent.body.id);
    const wrong = await call('GET', `/v1/jobs/${sent.body.id}`, { key: 'nope', as: 'x-api-key' });
    expect(wrong.status).toBe(401);
    expect(wrong.body.error.message).toMatch(/x-api-key.*Authorization: Bearer/);
    expect((await call('DELETE', `/v1/jobs/${sent.body.id}`, { as: 'x-api-key' })).status).toBe(
      200,
    );
  });

  it("hides another tenant's jobs (404) and scopes idempotency keys by tenant", async () => {
    const mine = await post({ request: message(), idempotency_key: 'order-7', tenant: 'beta' });
    expect(mine.status).toBe(202);
    expect(mine.body).toEqual({ id: expect.any(String), created: true });
    expect(mine.headers.get('location')).toBe(`/v1/jobs/${mine.body.id}`);
    const job = await served.api.producer.queue.getJob(mine.body.id);
    expect(job!.data.tenant).toBe('acme');

    for (const [method, path] of [
      ['GET', `/v1/jobs/${mine.body.id}`],
      ['GET', `/v1/jobs/${mine.body.id}/wait?timeout=0`],
      ['DELETE', `/v1/jobs/${mine.body.id}`],
    ] as const) {
      const other = await call(method, path, { key: BETA_KEY });
      expect(other.status).toBe(404);
      expect(other.body.error.code).toBe('job_not_found');
    }
    const again = await post({ request: message(), idempotency_key: 'order-7' });
    expect(again.body).toEqual({ id: mine.body.id, created: false });
    const theirs = await post({ request: message(), idempotency_key: 'order-7' }, BETA_KEY);
    expect(theirs.body.created).toBe(true);
    expect(theirs.body.id).not.toBe(mine.body.id);
  });
});

describe('HTTP API: errors', () => {
  it('answers 400 invalid_json for a body that is not JSON or not an object', async () => {
    for (const raw of ['{"request":', '', '[1,2]', '"text"']) {
      const r = await call('POST', '/v1/jobs', { raw });
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('invalid_json');
    }
  });

  it('answers 400 invalid_request naming the field', async () => {
    const cases: [unknown, string][] = [
      [{ request: { ...message(), max_tokens: -5 } }, 'request.max_tokens'],
      [
        { request: { ...message(), messages: [{ role: 'bot', content: 'x' }] } },
        'request.messages.0.role',
      ],
      [{}, 'request'],
      [{ request: message(), priority: 'asap' }, 'priority'],
      [{ request: message(), idempotency_key: 12 }, 'idempotency_key'],
      [{ request: message(), idempotency_key: '' }, 'idempotency_key'],
      [{ request: message(), colour: 'red' }, 'colour'],
      [{ request: message(), meta: { file: 3 } }, 'meta.file'],
    ];
    for (const [body, field] of cases) {
      const r = await post(body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.error).toMatchObject({ code: 'invalid_request', field });
    }
    const r = await post({ request: { ...message(), max_tokens: -5 } });
    expect(r.body.error.message).toContain('got -5');
    expect(await served.api.producer.queue.count()).toBe(0);
  });

  it('answers 413 body_too_large and 415 for a body that is not JSON', async () => {
    const big = await post({ request: message('x'.repeat(30_000)) });
    expect(big.status).toBe(413);
    expect(big.body.error.code).toBe('body_too_large');
    const text = await call('POST', '/v1/jobs', { raw: 'hello', type: 'text/plain' });
    expect(text.status).toBe(415);
    expect(text.body.error.code).toBe('unsupported_media_type');
  });

  it('answers 422 cost_exceeds_limit for a request that can never fit', async () => {
    const r = await post({ request: message('hi', 5_000) });
    expect(r.status).toBe(422);
    expect(r.body.error.code).toBe('cost_exceeds_limit');
    expect(r.body.error.message).toContain('outputTokens');
  });

  it('answers 429 queue_full with Retry-After at the depth bound', async () => {
    const first = await post({ request: message('first'), idempotency_key: 'full-1' });
    for (let i = 0; i < 3; i++)
      expect((await post({ request: message(`n${i}`) })).status).toBe(202);
    const r = await post({ request: message('one too many') });
    expect(r.status).toBe(429);
    expect(r.body.error.code).toBe('queue_full');
    expect(r.body.error.message).toContain('4 waiting, bound 4');
    expect(Number(r.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    // A repeated idempotency key still finds its job in a full queue: it takes no room.
    const repeat = await post({ request: message('first'), idempotency_key: 'full-1' });
    expect(repeat.status).toBe(202);
    expect(repeat.body).toEqual({ id: first.body.id, created: false });
    expect(await served.api.producer.queue.getPrioritizedCount()).toBe(4);
  });

  it('answers 404 not_found for an unknown route, and serves the OpenAPI document without a key', async () => {
    expect((await call('GET', '/v2/nothing')).body.error.code).toBe('not_found');
    const doc = await call('GET', '/openapi.json', { key: null });
    expect(doc.status).toBe(200);
    expect(doc.body.openapi).toBe('3.1.0');
    expect(Object.keys(doc.body.paths)).toEqual(
      expect.arrayContaining(['/v1/jobs', '/v1/jobs/{id}', '/v1/jobs/{id}/wait']),
    );
    expect(doc.body.paths['/v1/jobs'].post.responses['429']).toBeDefined();
  });

  it('answers 503 redis_unavailable when Redis does not answer', async () => {
    const down = await startHttpApi({
      config: resolveConfig({
        flags: { queue: 'q', prefix: served.names.prefix, redisUrl: 'redis://127.0.0.1:1' },
        env: {},
      }),
      apiKeys: API_KEYS,
      port: 0,
      commandTimeoutMs: 500,
    });
    try {
      const headers = { authorization: `Bearer ${ACME_KEY}`, 'content-type': 'application/json' };
      const res = await fetch(`${down.url}/v1/jobs`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ request: message() }),
      });
      expect(res.status).toBe(503);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe(
        'redis_unavailable',
      );
      const get = await fetch(`${down.url}/v1/jobs/abc`, { headers });
      expect(get.status).toBe(503);
    } finally {
      await down.close();
    }
  });
});

describe('HTTP API: jobs', () => {
  it('GET shows the state; /wait long-polls to the result, or answers 202 when time runs out', async () => {
    const { body } = await post({
      request: message('hello'),
      priority: 'interactive',
      meta: { source: 'test' },
    });
    const shown = await call('GET', `/v1/jobs/${body.id}`);
    expect(shown.status).toBe(200);
    expect(shown.body).toMatchObject({
      id: body.id,
      state: 'waiting',
      priority: 10,
      meta: { source: 'test' },
    });

    const early = await call('GET', `/v1/jobs/${body.id}/wait?timeout=0.2`);
    expect(early.status).toBe(202);
    expect(early.body.state).toBe('waiting');

    const waiting = call('GET', `/v1/jobs/${body.id}/wait?timeout=8`);
    await new Promise((r) => setTimeout(r, 100));
    const w = startEchoWorker();
    try {
      const done = await waiting;
      expect(done.status).toBe(200);
      expect(done.body.state).toBe('completed');
      expect(done.body.result.message.content).toEqual([{ type: 'text', text: 'echo: hello' }]);
      expect((await call('GET', `/v1/jobs/${body.id}`)).body.state).toBe('completed');

      const failing = await post({ request: message('fail') });
      const failed = await call('GET', `/v1/jobs/${failing.body.id}/wait?timeout=8`);
      expect(failed.status).toBe(200);
      expect(failed.body).toMatchObject({
        state: 'failed',
        error: {
          code: 'job_failed',
          message: expect.stringContaining('spend cap'),
          error_class: 'RateLimitError',
          status: 429,
        },
      });
      expect((await call('GET', `/v1/jobs/${body.id}/wait?timeout=999`)).body.error.field).toBe(
        'timeout',
      );
    } finally {
      await w.close();
    }
  });

  it('DELETE cancels a job that has not started, and answers 409 once it is active or finished', async () => {
    const { body } = await post({ request: message('cancel me') });
    const cancelled = await call('DELETE', `/v1/jobs/${body.id}`);
    expect(cancelled.status).toBe(200);
    expect(cancelled.body).toEqual({ id: body.id, state: 'cancelled' });
    expect((await call('GET', `/v1/jobs/${body.id}`)).status).toBe(404);
    expect(await served.api.producer.queue.count()).toBe(0);

    const held = await post({ request: message('hold') });
    const done = await post({ request: message('quick') });
    const w = startEchoWorker();
    try {
      await until(
        async () => (await served.api.producer.queue.getJobState(held.body.id)) === 'active',
      );
      await until(
        async () => (await served.api.producer.queue.getJobState(done.body.id)) === 'completed',
      );
      const active = await call('DELETE', `/v1/jobs/${held.body.id}`);
      expect(active.status).toBe(409);
      expect(active.body.error).toMatchObject({
        code: 'job_not_cancellable',
        message: expect.stringContaining('active'),
      });
      const finished = await call('DELETE', `/v1/jobs/${done.body.id}`);
      expect(finished.status).toBe(409);
      expect(finished.body.error.message).toContain('completed');
    } finally {
      await w.close();
    }
  });
});

describe('llmq serve', () => {
  it('binds 127.0.0.1, prints its URL first, and stops on SIGINT', async () => {
    const script = `
      import { Command } from 'commander';
      import { registerServeCommand } from './scripts/cli/serve.ts';
      const program = new Command('llmq');
      registerServeCommand(program);
      await program.parseAsync(process.argv.slice(1), { from: 'user' });
    `;
    const child = spawn(
      process.execPath,
      tsxEval(script, ['serve', '--port', '0', '--queue', served.names.queue]),
      {
        cwd: process.cwd(),
        env: {
          ...process.env,
          REDIS_URL,
          LLMQ_PREFIX: served.names.prefix,
          LLMQ_API_KEYS: API_KEYS,
        },
      },
    );
    let out = '';
    child.stdout.on('data', (c) => (out += c));
    await until(() => out.includes('\n'), 60_000, 50);
    const url = out.split('\n')[0]!;
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const res = await fetch(`${url}/v1/jobs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BETA_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ request: message() }),
    });
    expect(res.status).toBe(202);
    child.kill('SIGINT');
    const [code] = await once(child, 'exit');
    expect(code).toBe(0);
  }, 90_000);

  it('refuses to start without API keys', async () => {
    const script = `
      import { Command } from 'commander';
      import { registerServeCommand } from './scripts/cli/serve.ts';
      const program = new Command('llmq');
      registerServeCommand(program);
      try { await program.parseAsync(['serve', '--port', '0'], { from: 'user' }); } catch (e) { console.error(e.message); process.exit(2); }
    `;
    const child = spawn(process.execPath, tsxEval(script), {
      cwd: process.cwd(),
      env: { ...process.env, REDIS_URL, LLMQ_API_KEYS: '' },
    });
    let err = '';
    child.stderr.on('data', (c) => (err += c));
    const [code] = await once(child, 'exit');
    expect(code).toBe(2);
    expect(err).toContain('no API keys');
  }, 90_000);
});

describe('HTTP API: via and deadline', () => {
  it('takes a job via batches outside the per-minute limits, and shows it as batch-bound', async () => {
    // 5000 output tokens can never fit the per-minute limit of 1000 through messages…
    const big = message('Summarize the annual report.', 5_000);
    const refused = await post({ request: big });
    expect(refused.status).toBe(422);
    expect(refused.body.error.code).toBe('cost_exceeds_limit');
    // …but Message Batches run outside it.
    const r = await post({ request: big, via: 'batches', deadline: '6h' });
    expect(r.status).toBe(202);
    const got = await call('GET', `/v1/jobs/${r.body.id}`);
    expect(got.status).toBe(200);
    expect(got.body).toMatchObject({ id: r.body.id, state: 'waiting', via: 'batches' });
    // auto with room before the deadline takes batches too; a tight deadline, messages.
    const auto = await post({ request: message('auto, far'), via: 'auto', deadline: '2d' });
    expect((await call('GET', `/v1/jobs/${auto.body.id}`)).body.via).toBe('batches');
    const soon = await post({ request: message('auto, near'), via: 'auto', deadline: '10m' });
    expect((await call('GET', `/v1/jobs/${soon.body.id}`)).body.via).toBe('messages');
  });

  it('answers 400 naming the field for a bad via or deadline, or what batches refuse; adds nothing', async () => {
    const cases: [Record<string, unknown>, string, RegExp][] = [
      [{ via: 'carrier-pigeon' }, 'via', /messages.*batches.*auto/],
      [{ via: 'batches', deadline: 'tomorrow' }, 'deadline', /duration such as 90m/],
      [{ via: 'batches', deadline: '2001-01-01T00:00:00Z' }, 'deadline', /in the future/],
      [{ via: 'batches', stream: true }, 'request.stream', /does not stream/],
      [
        { via: 'batches', request: message('x'.repeat(10), 250_000) },
        'request.messages',
        /context of 200000/,
      ],
    ];
    const batchBound = await served.api.producer.batchJobs.queue.count();
    for (const [extra, field, message_] of cases) {
      const r = await post({ request: message('never added'), ...extra });
      expect(r.status, JSON.stringify(extra)).toBe(400);
      expect(r.body.error).toMatchObject({ code: 'invalid_request', field });
      expect(r.body.error.message).toMatch(message_);
    }
    expect(await served.api.producer.queue.count()).toBe(0);
    expect(await served.api.producer.batchJobs.queue.count()).toBe(batchBound);
  });
});

describe('HTTP API: retry_for', () => {
  it('keeps a job’s retry_for as its retryForMs, and answers 400 naming the field for a bad one', async () => {
    const r = await post({ request: message('Patient.'), retry_for: '30m' });
    expect(r.status).toBe(202);
    expect((await served.api.producer.queue.getJob(r.body.id))!.data.retryForMs).toBe(1_800_000);
    const zero = await post({ request: message('Counting.'), retry_for: '0' });
    expect((await served.api.producer.queue.getJob(zero.body.id))!.data.retryForMs).toBe(0);
    // Without it, the job carries none: the worker's setting applies.
    const plain = await post({ request: message('Default.') });
    expect(
      (await served.api.producer.queue.getJob(plain.body.id))!.data.retryForMs,
    ).toBeUndefined();
    const before = await served.api.producer.queue.count();
    for (const bad of ['forever', '600', '8d', 30]) {
      const refused = await post({ request: message('never added'), retry_for: bad });
      expect(refused.status, JSON.stringify(bad)).toBe(400);
      expect(refused.body.error).toMatchObject({ code: 'invalid_request', field: 'retry_for' });
    }
    expect(await served.api.producer.queue.count()).toBe(before);
  });
});
