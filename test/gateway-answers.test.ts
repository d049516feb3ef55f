/**
 * The gateway answers as the API does: what it can refuse before queueing it refuses at once
 * with the API's status and error type, every answer carries a request-id, stream pings pass,
 * the models are listed, and a 529 reads as the API's.
 */
import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HttpApi } from '../producer/http/server.ts';
import { resolveConfig } from '../shared/config.ts';
import { fleetLimitsOf, writeFleetLimits } from '../shared/fleet-limits.ts';
import { API_VERSION, sdkFor, startGateway, TENANT_KEYS } from './fixtures/gateway.ts';
import { sendRaw } from './fixtures/raw-http.ts';
import {
  openPool,
  type Pool,
  type Proc,
  request as plainRequest,
  startCli,
} from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const request = (...a: Parameters<typeof plainRequest>) =>
  plainRequest(...a) as Anthropic.MessageCreateParamsNonStreaming;

/** Every job the pool's queue holds, in any state, and every dead letter. */
async function leftBehind(pool: Pool): Promise<{ jobs: number; dead: number }> {
  const c = await pool.counts();
  const jobs = c.wait + c.prioritized + c.active + c.delayed + c.completed + c.failed;
  return { jobs, dead: (await pool.deadLetters()).length };
}

/** The API error of a rejected SDK call. */
async function apiErrorOf(
  call: Promise<unknown>,
): Promise<InstanceType<typeof Anthropic.APIError>> {
  const err = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(Anthropic.APIError);
  return err as InstanceType<typeof Anthropic.APIError>;
}

/** The request-id of an error: in its header and, the same, in its body. */
function requestIdOf(e: InstanceType<typeof Anthropic.APIError>): string {
  const id = e.headers?.get('request-id') ?? '';
  expect(id).toMatch(/^req_/);
  expect((e.error as { request_id?: string }).request_id).toBe(id);
  return id;
}

describe('a request no worker can ever admit', () => {
  let pool: Pool;
  let worker: Proc;
  let api: HttpApi;
  beforeAll(async () => {
    pool = await openPool('gwfit');
    // The workers' limits come from their own flags; serve gets only Redis and the keys.
    worker = startCli(['worker', '--tpm', '100000', '--window', '60'], pool.cliEnv());
    await until(() => worker.stderr().includes('worker started'), 30_000);
    api = await startGateway(pool);
  });
  afterAll(async () => {
    await api?.close();
    await worker?.kill('SIGKILL');
    await pool?.cleanup();
  });

  it('is one 400 invalid_request_error at once: the SDK does not retry, no job, no dead letter', async () => {
    const sdk = sdkFor(api, TENANT_KEYS.acme, 2);
    const e = await apiErrorOf(
      sdk.messages.create(request('Far too long an answer.', 150_000), { timeout: 60_000 }),
    );
    expect(e).toBeInstanceOf(Anthropic.BadRequestError);
    expect(e.status).toBe(400);
    expect(e.type).toBe('invalid_request_error');
    expect((e.error as { error: { message: string } }).error.message).toMatch(
      /^max_tokens: the request needs \d+ tokens but scope "global" allows only 100000 per window/,
    );
    requestIdOf(e);
    // The job API refuses it the same way, in its own shape.
    const res = await fetch(`${api.url}/v1/jobs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${TENANT_KEYS.acme}` },
      body: JSON.stringify({ request: request('Far too long an answer.', 150_000) }),
    });
    expect(res.status).toBe(422);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe(
      'cost_exceeds_limit',
    );
    expect(await leftBehind(pool)).toEqual({ jobs: 0, dead: 0 });
    expect(pool.mock.stats().attempts).toBe(0);
  });

  it('GET /v1/models is a 404 in the API shape while the fleet names no model', async () => {
    const e = await apiErrorOf(sdkFor(api).models.list());
    expect(e).toBeInstanceOf(Anthropic.NotFoundError);
    expect(e.type).toBe('not_found_error');
    requestIdOf(e);
  });
});

describe('a job a worker meets that it can never admit', () => {
  let pool: Pool;
  let api: HttpApi;
  beforeAll(async () => {
    pool = await openPool('gwnofit');
    // Limits of a worker's own, not stored (a library worker): the gateway cannot know them.
    await pool.worker({ limiter: { limits: { tokens: 1_000 }, windowMs: 10_000 } });
    api = await startGateway(pool);
  });
  afterAll(async () => {
    await api?.close();
    await pool?.cleanup();
  });

  it('ends with the same 400, so the SDK sends it once: one dead letter for one call', async () => {
    const e = await apiErrorOf(
      sdkFor(api, TENANT_KEYS.acme, 2).messages.create(request('Over the limit.', 2_000)),
    );
    expect(e).toBeInstanceOf(Anthropic.BadRequestError);
    expect(e.type).toBe('invalid_request_error');
    expect((e.error as { error: { message: string } }).error.message).toContain(
      'allows only 1000 per window',
    );
    requestIdOf(e);
    expect((await leftBehind(pool)).dead).toBe(1);
    expect(pool.mock.stats().attempts).toBe(0);
  });
});

describe('the gateway of a fleet with per-model limits', () => {
  let pool: Pool;
  let api: HttpApi;
  beforeAll(async () => {
    pool = await openPool('gwmodels');
    await pool.worker({ concurrency: 4 });
    const limits = fleetLimitsOf(
      resolveConfig({
        env: {
          LLMQ_MODELS: JSON.stringify({
            'claude-test-1': { rpm: 1_000 },
            'claude-test-2': { rpm: 1_000 },
            'claude-x-*': { rpm: 10 },
          }),
          LLMQ_MODELS_STRICT: 'true',
        },
      }),
    );
    await writeFleetLimits(pool.redis, pool.names, limits, 'test');
    api = await startGateway(pool);
  });
  afterAll(async () => {
    await api?.close();
    await pool?.cleanup();
  });

  it('lists the models the fleet names, and retrieves any its patterns cover', async () => {
    const sdk = sdkFor(api);
    const ids: string[] = [];
    for await (const m of sdk.models.list({ limit: 1 })) ids.push(m.id);
    expect(ids).toEqual(['claude-test-1', 'claude-test-2']);
    const one = await sdk.models.retrieve('claude-x-9');
    expect(one).toMatchObject({ type: 'model', id: 'claude-x-9', display_name: 'claude-x-9' });
    const e = await apiErrorOf(sdk.models.retrieve('gpt-4o'));
    expect(e).toBeInstanceOf(Anthropic.NotFoundError);
    requestIdOf(e);
  });

  it('a model the fleet does not serve is a 404 not_found_error at once, and nothing is queued', async () => {
    const e = await apiErrorOf(sdkFor(api).messages.create(request('Hello?', 20, 'gpt-nope')));
    expect(e).toBeInstanceOf(Anthropic.NotFoundError);
    expect(e.type).toBe('not_found_error');
    expect((e.error as { error: { message: string } }).error.message).toMatch(/^model: gpt-nope/);
    expect(await leftBehind(pool)).toEqual({ jobs: 0, dead: 0 });
  });

  it('relays the provider’s ping events in a stream', async () => {
    const res = await fetch(`${api.url}/v1/messages`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-api-key': TENANT_KEYS.acme,
        ...API_VERSION,
      },
      body: JSON.stringify({ ...request('Stream a few words.', 40), stream: true }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('request-id')).toMatch(/^req_/);
    const names = [...(await res.text()).matchAll(/^event: (\w+)$/gm)].map((m) => m[1]);
    // The mock sends one ping after the block starts, as the API does; the SDK skips it.
    expect(names.slice(0, 4)).toEqual([
      'message_start',
      'content_block_start',
      'ping',
      'content_block_delta',
    ]);
    expect(names.at(-1)).toBe('message_stop');
  });

  it('answers 401s with a request-id, in the header and the body', async () => {
    const e = await apiErrorOf(sdkFor(api, 'sk-not-a-key').messages.create(request()));
    expect(e).toBeInstanceOf(Anthropic.AuthenticationError);
    const first = requestIdOf(e);
    const again = await apiErrorOf(sdkFor(api, 'sk-not-a-key').messages.create(request()));
    expect(requestIdOf(again)).not.toBe(first);
  });
});

describe('a 529 from the gateway', () => {
  let pool: Pool;
  let api: HttpApi;
  beforeAll(async () => {
    pool = await openPool('gw529');
    api = await startGateway(pool, {}, { maxWaitMs: 500 });
  });
  afterAll(async () => {
    await api?.close();
    await pool?.cleanup();
  });

  const call = () =>
    sendRaw(
      { host: '127.0.0.1', port: Number(new URL(api.url).port) },
      'POST',
      '/v1/messages',
      { 'content-type': 'application/json', 'x-api-key': TENANT_KEYS.acme, ...API_VERSION },
      JSON.stringify(request('Anyone there?', 20)),
    );

  it('reads "529 Overloaded" and says no worker is running when none is', async () => {
    const res = await call();
    expect([res.status, res.statusMessage]).toEqual([529, 'Overloaded']);
    const body = JSON.parse(res.text);
    expect(body.error.type).toBe('overloaded_error');
    expect(body.error.message).toContain(`no worker is running on queue ${pool.names.queue}`);
    expect(body.error.message).not.toContain('budget');
    expect(body.request_id).toBe(res.headers['request-id']);
  });

  it('blames the budget when a worker runs but has no room', async () => {
    await pool.worker({ limiter: { limits: { requests: 1 }, windowMs: 60_000, headroom: 0 } });
    // The window's one request, spent by a job of the queue's own.
    const spent = await pool.producer.enqueue(request('The only one this minute.', 20));
    await until(async () => (await pool.queue.getJobState(spent)) === 'completed', 20_000);
    const res = await call();
    expect([res.status, res.statusMessage]).toEqual([529, 'Overloaded']);
    expect(JSON.parse(res.text).error.message).toContain('the budget had no room for it');
  });
});
