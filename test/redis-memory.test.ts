import { spawn } from 'node:child_process';
import type Anthropic from '@anthropic-ai/sdk';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashApiKey } from '../producer/http/api-keys.ts';
import type { HttpApi } from '../producer/http/server.ts';
import { startHttpApi } from '../producer/http/server.ts';
import { resolveConfig } from '../shared/config.ts';
import { type PrivateRedis, startPrivateRedis } from '../shared/private-redis.ts';
import { connectRedis } from '../shared/redis.ts';
import { API_VERSION, sdkFor, startGateway, TENANT_KEYS } from './fixtures/gateway.ts';
import { openPool, type Pool, ROOT } from './fixtures/worker-harness.ts';
import { llmqFromSource, testNames, until } from './helpers.ts';

const KEY = 'sk-memory-0123456789';
const message = (text: string) => ({
  model: 'claude-test-1',
  max_tokens: 20,
  messages: [{ role: 'user', content: text }],
});

let server: PrivateRedis;
let redis: Redis;
beforeAll(async () => {
  server = await startPrivateRedis();
  redis = connectRedis(server.url) as Redis;
});
afterAll(async () => {
  redis?.disconnect();
  await server?.stop();
});

const usedMemory = async () => Number(/^used_memory:(\d+)/m.exec(await redis.info('memory'))![1]);

/** Runs the CLI from source against the private Redis; resolves with its exit code and stderr. */
function cli(
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, llmqFromSource(args), {
      cwd: ROOT,
      env: { ...process.env, REDIS_URL: server.url, ...env },
      stdio: ['pipe', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => {
      stderr += c.toString();
    });
    child.stdin.end(JSON.stringify(message('from the CLI')));
    child.on('exit', (code) => resolve({ code: code ?? -1, stderr }));
  });
}

describe('Redis out of memory', () => {
  let api: HttpApi;
  const warnings: string[] = [];
  const errors: Record<string, unknown>[] = [];
  const names = testNames('oom');

  beforeAll(async () => {
    api = await startHttpApi({
      config: resolveConfig({
        flags: { queue: names.queue, prefix: names.prefix, redisUrl: server.url },
        env: {},
      }),
      apiKeys: `acme:${hashApiKey(KEY)}`,
      port: 0,
      logger: { warn: (m) => warnings.push(m), error: (_m, f) => errors.push(f ?? {}) },
    });
  });
  afterAll(async () => {
    await redis.config('SET', 'maxmemory', '0');
    await api?.close();
  });

  const post = (path: string, body: unknown, headers: Record<string, string>) =>
    fetch(`${api.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });

  it('answers 503 with a code that names it, logs it once, writes nothing, and recovers', async () => {
    const auth = { authorization: `Bearer ${KEY}` };
    expect((await post('/v1/jobs', { request: message('before') }, auth)).status).toBe(202);
    const keysBefore = await redis.dbsize();
    await redis.config('SET', 'maxmemory', '1');

    for (let i = 0; i < 6; i++) {
      const res = await post('/v1/jobs', { request: message(`during ${i}`) }, auth);
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('5');
      const { error } = (await res.json()) as { error: { code: string; message: string } };
      expect(error.code).toBe('redis_out_of_memory');
      expect(error.message).toMatch(/out of memory .*maxmemory.*nothing was written/);
    }
    const viaGateway = await post('/v1/messages', message('during'), {
      'x-api-key': KEY,
      ...API_VERSION,
    });
    expect(viaGateway.status).toBe(503);
    expect(((await viaGateway.json()) as { error: { type: string } }).error.type).toBe(
      'overloaded_error',
    );
    // Seven refusals, one warning of the state; each answer's line names its request id.
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/is out of memory \(maxmemory reached\)/);
    expect(errors).toHaveLength(7);
    for (const e of errors) expect(e).toMatchObject({ status: 503, request_id: /^req_/ });
    // The CLI says so in one line, without a stack trace.
    for (const args of [['enqueue', '--file', '-'], ['status']]) {
      const run = await cli(args, { LLMQ_QUEUE: names.queue, LLMQ_PREFIX: names.prefix });
      expect(run.code, args.join(' ')).toBe(1);
      expect(run.stderr.trim().split('\n')).toHaveLength(1);
      expect(run.stderr).toMatch(/^llmq: Redis at .* is out of memory/);
    }
    expect(await redis.dbsize()).toBe(keysBefore);

    await redis.config('SET', 'maxmemory', '0');
    expect((await post('/v1/jobs', { request: message('after') }, auth)).status).toBe(202);
  });
});

describe('large requests', () => {
  let pool: Pool;
  let api: HttpApi;

  beforeAll(async () => {
    pool = await openPool('mem', {}, {}, { redisUrl: server.url });
    // The queue holds 30 MB of waiting requests at most.
    api = await startGateway(pool, { redisUrl: server.url, maxDepthBytes: '30mb' });
  });
  afterAll(async () => {
    await api?.close();
    await pool?.cleanup();
  });

  const big = (mb: number) => message(`${'lorem ipsum '.repeat((mb * 1024 * 1024) / 12)}`);

  it('the byte bound refuses with 429 queue_full and Retry-After, and leaves nothing behind', async () => {
    const post = (body: unknown) =>
      fetch(`${api.url}/v1/jobs`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TENANT_KEYS.acme}`,
          'content-type': 'application/json',
        },
        body: JSON.stringify(body),
      });
    expect((await post({ request: big(20) })).status).toBe(202);
    const keys = await redis.dbsize();
    const full = await post({ request: big(20) });
    expect(full.status).toBe(429);
    expect(full.headers.get('retry-after')).toBe('1');
    const { error } = (await full.json()) as { error: { code: string; message: string } };
    expect(error.code).toBe('queue_full');
    expect(error.message).toMatch(/is full \(20 MB of requests waiting, bound 30 MB\)/);
    expect(await redis.dbsize()).toBe(keys);
    expect(await pool.counts()).toMatchObject({ prioritized: 1 });
    await pool.queue.obliterate({ force: true });
  });

  it('a 20 MB request through the gateway is answered, and Redis lets it go once answered', async () => {
    await pool.worker({ concurrency: 2 });
    // Warm: the worker's structures, the scripts and the gateway's connections exist.
    await sdkFor(api).messages.create(
      message('warm up') as Anthropic.MessageCreateParamsNonStreaming,
    );
    const before = await usedMemory();
    const { data, response } = await sdkFor(api, TENANT_KEYS.acme, 0)
      .messages.create(big(20) as Anthropic.MessageCreateParamsNonStreaming)
      .withResponse();
    expect(data.type).toBe('message');
    expect(data.usage.input_tokens).toBeGreaterThan(1_000_000);
    const id = response.headers.get('llmq-job-id')!;
    // The request was let go in the step that completed the job: once answered, Redis is back
    // within 5 MB of where it was, and the job keeps its result.
    await until(async () => (await usedMemory()) < before + 5 * 1024 * 1024, 5_000, 100);
    const job = (await pool.queue.getJob(id))!;
    expect(job.data.request).toBeUndefined();
    expect(job.returnvalue.message.usage.input_tokens).toBe(data.usage.input_tokens);
  });
});
