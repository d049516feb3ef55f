import { execFile } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { promisify } from 'node:util';
import Anthropic from '@anthropic-ai/sdk';
import { Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { jobIdForKey } from '../producer/idempotency.ts';
import { Producer, type ProducerOptions } from '../producer/producer.ts';
import { CostExceedsLimitError, RequestValidationError } from '../shared/errors.ts';
import { bullPrefix, type QueueNames } from '../shared/keys.ts';
import { deleteKeys, newRedis, REDIS_URL, testNames, tsxEval } from './helpers.ts';

const run = promisify(execFile);

let redis: Redis;
let names: QueueNames;
const producers: Producer[] = [];

beforeEach(() => {
  redis = newRedis();
  names = testNames('penq');
});
afterEach(async () => {
  await Promise.all(producers.splice(0).map((p) => p.close()));
  await deleteKeys(redis, names.prefix);
  redis.disconnect();
});

function make(o: Partial<ProducerOptions> = {}): Producer {
  const p = new Producer({ redis, names, ...o });
  producers.push(p);
  return p;
}

const request = (text = 'Summarize the plot of Hamlet.', maxTokens = 256) => ({
  model: 'claude-test',
  max_tokens: maxTokens,
  messages: [{ role: 'user', content: text }],
});

async function caught(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => {
      throw new Error('expected a rejection');
    },
    (e: unknown) => e,
  );
}

describe('enqueue validation', () => {
  it('names the field and the bad value, and writes nothing', async () => {
    const p = make();
    const err = await caught(p.enqueue({ ...request(), max_tokens: 0 }));
    expect(err).toBeInstanceOf(RequestValidationError);
    expect(err).toMatchObject({ code: 'REQUEST_INVALID', field: 'max_tokens' });
    expect((err as Error).message).toContain('got 0');

    const role = await caught(
      p.enqueue({ ...request(), messages: [{ role: 'bot', content: 'hi' }] }),
    );
    expect(role).toMatchObject({ field: 'messages.0.role' });
    expect((role as Error).message).toContain('"bot"');

    await expect(p.enqueue(request(), { priority: 'urgent' })).rejects.toMatchObject({
      field: 'priority',
    });
    await expect(p.enqueue(request(), { tenant: 'a b' })).rejects.toMatchObject({
      field: 'tenant',
    });
    await expect(p.enqueue(request(), { attempts: 0 })).rejects.toMatchObject({
      field: 'attempts',
    });
    await expect(p.enqueue(request(), { idempotencyKey: '' })).rejects.toMatchObject({
      field: 'idempotencyKey',
    });
    for (const retryForMs of [-1, 1.5, 8 * 86_400_000]) {
      const bad = await caught(p.enqueue(request(), { retryForMs }));
      expect(bad).toMatchObject({ field: 'retryForMs' });
      expect((bad as Error).message).toContain(`(got ${retryForMs})`);
    }
    expect(await p.queue.count()).toBe(0);
  });

  it('enqueueMany names the index of the bad request and adds none of them', async () => {
    const p = make();
    const requests = [request('a'), request('b'), { ...request('c'), model: '' }, request('d')];
    const err = await caught(p.enqueueMany(requests));
    expect(err).toMatchObject({ code: 'REQUEST_INVALID', field: '2.model' });
    expect(await p.queue.count()).toBe(0);
  });

  it('refuses a cost that can never fit, saying which limit', async () => {
    const p = make({
      limits: { outputTokens: 1_000, tokens: 5_000 },
      scopes: { 'tenant:small': { tokens: 600 } },
      headroom: 0.1,
    });
    const global = await caught(p.enqueue(request('x', 950)));
    expect(global).toBeInstanceOf(CostExceedsLimitError);
    // 950 output tokens fit 1000, but not 1000 less the 10% headroom the limiter keeps.
    expect(global).toMatchObject({
      scope: 'global',
      dimension: 'outputTokens',
      cost: 950,
      limit: 900,
    });
    const tenant = await caught(p.enqueue(request('x', 800), { tenant: 'small' }));
    expect(tenant).toMatchObject({
      code: 'COST_EXCEEDS_LIMIT',
      scope: 'tenant:small',
      dimension: 'tokens',
      limit: 540,
    });
    expect((tenant as Error).message).toContain('tenant:small');
    await expect(p.enqueue(request('x', 800))).resolves.toBeTypeOf('string');
  });
});

describe('enqueue', () => {
  it('puts the priority, tenant, attempts and timeout on the job', async () => {
    const p = make();
    const id = await p.enqueue(request(), {
      priority: 'interactive',
      tenant: 'acme',
      attempts: 3,
      timeoutMs: 30_000,
      meta: { file: 'a.txt' },
    });
    const job = (await p.queue.getJob(id))!;
    expect(job.opts.priority).toBe(10);
    expect(job.opts.attempts).toBe(3);
    expect(job.data).toMatchObject({
      tenant: 'acme',
      // The model's own scope: where the provider's headers tell its limits.
      scopes: ['tenant:acme', `model:${job.data.request.model}`],
      timeoutMs: 30_000,
      meta: { file: 'a.txt' },
    });
    expect(job.data.cost.outputTokens).toBe(256);
    expect(await p.queue.getJobState(id)).toBe('prioritized');
    const numbered = await p.enqueue(request(), { priority: 7 });
    expect((await p.queue.getJob(numbered))!.opts.priority).toBe(7);
    expect((await p.queue.getJob(await p.enqueue(request())))!.opts.priority).toBe(100);
  });

  it('costs the input with the provider when asked for an exact count', async () => {
    let seen: Record<string, unknown> | undefined;
    const server: Server = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        seen = { url: req.url, ...JSON.parse(body) };
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ input_tokens: 1234 }));
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const client = new Anthropic({
        apiKey: 'test-key',
        baseURL: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
        maxRetries: 0,
      });
      const p = make({ tokenCounter: client });
      const id = await p.enqueue(
        { ...request('count me'), system: 'Be brief.' },
        { exactCount: true },
      );
      expect((await p.queue.getJob(id))!.data.cost).toEqual({
        requests: 1,
        inputTokens: 1234,
        outputTokens: 256,
      });
      expect(seen).toMatchObject({
        url: '/v1/messages/count_tokens',
        model: 'claude-test',
        system: 'Be brief.',
      });
      expect(seen).not.toHaveProperty('max_tokens');
    } finally {
      server.close();
    }
  });

  // 100k jobs take ~10-18 s on a busy 2-core machine (Redis-bound: BullMQ's add script); a
  // quarter of that keeps this file short.
  it('enqueueMany adds 25k jobs with addBulk in chunks, in order', async () => {
    const p = make({ maxDepth: 0 });
    const requests = Array.from({ length: 25_000 }, (_, i) => request(`doc ${i}`, 64));
    const started = Date.now();
    let chunks = 0;
    const ids = await p.enqueueMany(requests, { priority: 'batch', onChunk: () => chunks++ });
    const ms = Date.now() - started;
    expect(ids).toHaveLength(25_000);
    expect(new Set(ids).size).toBe(25_000);
    expect(chunks).toBe(25);
    expect(await p.queue.getPrioritizedCount()).toBe(25_000);
    const [first] = await p.queue.getPrioritized(0, 0);
    expect(first!.id).toBe(ids[0]);
    console.log(`enqueueMany: 25000 jobs in ${ms} ms (${Math.round(25_000_000 / ms)} jobs/s)`);
  }, 60_000);
});

describe('idempotency keys', () => {
  it('the same key makes one job, across two processes, and every caller gets its id', async () => {
    const child = `
      import { Redis } from 'ioredis';
      import { Producer } from './producer/producer.ts';
      const [names, key, at] = [JSON.parse(process.argv[1]), process.argv[2], Number(process.argv[3])];
      const redis = new Redis(process.env.REDIS_URL, { maxRetriesPerRequest: null });
      const producers = Array.from({ length: 5 }, () => new Producer({ redis, names, maxDepth: 100 }));
      await new Promise((r) => setTimeout(r, at - Date.now()));
      const req = { model: 'claude-test', max_tokens: 32, messages: [{ role: 'user', content: 'once' }] };
      const out = await Promise.all(producers.map((p) => p.enqueueJob(req, { idempotencyKey: key })));
      console.log(JSON.stringify(out));
      await Promise.all(producers.map((p) => p.close()));
      redis.disconnect();
    `;
    const at = Date.now() + 2_500;
    const spawn = () =>
      run(process.execPath, tsxEval(child, [JSON.stringify(names), 'order-42', String(at)]), {
        cwd: process.cwd(),
        env: { ...process.env, REDIS_URL },
      });
    const [a, b] = await Promise.all([spawn(), spawn()]);
    const results = [...JSON.parse(a.stdout), ...JSON.parse(b.stdout)] as {
      id: string;
      created: boolean;
    }[];
    expect(results).toHaveLength(10);
    expect(new Set(results.map((r) => r.id))).toEqual(
      new Set([jobIdForKey('order-42', undefined)]),
    );
    expect(results.filter((r) => r.created)).toHaveLength(1);
    const p = make();
    expect(await p.queue.count()).toBe(1);
    // The depth reservations are all gone again.
    expect(await p.gate.depth()).toBe(1);
  }, 30_000);

  it('returns the finished job for a key until that job is removed; then the key makes a new job', async () => {
    const p = make();
    const first = await p.enqueueJob(request(), { idempotencyKey: 'k1' });
    expect(first.created).toBe(true);
    // A real BullMQ worker finishes it; then the same key is asked again.
    const worker = new Worker(names.queue, async () => ({ ok: true }), {
      connection: redis.duplicate(),
      prefix: bullPrefix(names),
    });
    await new Promise<void>((resolve) => worker.on('completed', () => resolve()));
    await worker.close();
    expect(await p.queue.getJobState(first.id)).toBe('completed');
    expect(await p.enqueueJob(request(), { idempotencyKey: 'k1' })).toEqual({
      id: first.id,
      created: false,
    });
    expect(await p.queue.count()).toBe(0);
    await p.queue.remove(first.id);
    expect(await p.enqueueJob(request(), { idempotencyKey: 'k1' })).toEqual({
      id: first.id,
      created: true,
    });
    expect(await p.queue.count()).toBe(1);
  });

  it('keys are scoped by tenant', async () => {
    const p = make();
    const a = await p.enqueue(request(), { idempotencyKey: 'same', tenant: 'a' });
    const b = await p.enqueue(request(), { idempotencyKey: 'same', tenant: 'b' });
    expect(a).not.toBe(b);
    expect(await p.enqueue(request(), { idempotencyKey: 'same', tenant: 'a' })).toBe(a);
    expect(await p.queue.count()).toBe(2);
  });

  it('enqueueMany skips requests whose key exists, and repeats within one call', async () => {
    const p = make();
    const existing = await p.enqueue(request(), { idempotencyKey: 'k2' });
    // The same requests under the same keys (another request is refused: idempotency-conflicts).
    const ids = await p.enqueueMany([request(), request('b'), request('c'), request('b')], {
      idempotencyKeys: ['k2', 'k3', undefined, 'k3'],
    });
    expect(ids[0]).toBe(existing);
    expect(ids[1]).toBe(ids[3]);
    expect(await p.queue.count()).toBe(3);
  });
});
