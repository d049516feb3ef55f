import { afterEach, describe, expect, it } from 'vitest';
import { startDashboard } from '../dashboard/server.ts';
import { hashApiKey } from '../producer/http/api-keys.ts';
import { type HttpApi, startHttpApi } from '../producer/http/server.ts';
import { Producer } from '../producer/producer.ts';
import { resolveConfig } from '../shared/config.ts';
import { depthSizesKey, llmqKey, type QueueNames } from '../shared/keys.ts';
import { metricsKey } from '../shared/metrics.ts';
import type { RedisClient } from '../shared/redis.ts';
import { requestDigest } from '../shared/request-digest.ts';
import type { QueueStatus } from '../shared/status.ts';
import { allCompleted, openPool, type Pool, request, runCli } from './fixtures/worker-harness.ts';
import { REDIS_URL, until } from './helpers.ts';

const KEY = 'sk-held-0123456789';

let pool: Pool | undefined;
let api: HttpApi | undefined;
afterEach(async () => {
  await api?.close();
  await pool?.cleanup();
  api = undefined;
  pool = undefined;
});

/** Bytes Redis holds for every key under the test's prefix (MEMORY USAGE, all samples). */
async function bytesHeld(redis: RedisClient, names: QueueNames): Promise<number> {
  let total = 0;
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${names.prefix}*`, 'COUNT', 500);
    cursor = next;
    for (const k of keys) total += Number((await redis.memory('USAGE', k, 'SAMPLES', 0)) ?? 0);
  } while (cursor !== '0');
  return total;
}

/** A request of about `kb` KB of text that varies from job to job (no two compress alike). */
const large = (i: number, kb: number) =>
  request(
    Array.from({ length: kb * 32 }, (_, n) => `line ${i}.${n} of a long report. `).join(''),
    20,
  );

function openApi(names: QueueNames): Promise<HttpApi> {
  return startHttpApi({
    config: resolveConfig({
      flags: { queue: names.queue, prefix: names.prefix, redisUrl: REDIS_URL },
      env: {},
    }),
    apiKeys: `acme:${hashApiKey(KEY)}`,
    port: 0,
  });
}

const call = async (a: HttpApi, method: string, path: string, body?: unknown) => {
  const res = await fetch(`${a.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  // biome-ignore lint/suspicious/noExplicitAny: JSON bodies read by the test
  return { status: res.status, body: (await res.json()) as any };
};

describe('what a completed job keeps', () => {
  it('keeps its result and its request’s digest, not its request: the queue holds a small fraction of what it ran', async () => {
    pool = await openPool('held', { latencyMs: 5 });
    api = await openApi(pool.names);
    const requests = Array.from({ length: 8 }, (_, i) => large(i, 300));
    const requestBytes = requests.reduce((n, r) => n + Buffer.byteLength(JSON.stringify(r)), 0);
    const ids: string[] = [];
    for (const [i, r] of requests.entries()) {
      const sent = await call(api, 'POST', '/v1/jobs', { request: r, idempotency_key: `doc-${i}` });
      expect(sent.status, JSON.stringify(sent.body)).toBe(202);
      ids.push(sent.body.id);
    }
    // While they wait, Redis holds every request.
    expect(await bytesHeld(pool.redis, pool.names)).toBeGreaterThan(requestBytes);

    await pool.worker({ limiter: { limits: { tokens: 10_000_000 }, windowMs: 2_000 } });
    await allCompleted(pool, ids, 30_000);

    const held = await bytesHeld(pool.redis, pool.names);
    expect(held).toBeLessThan(requestBytes * 0.05);

    // The result is still read as before, the job keeps what names its request.
    const job = (await pool.job(ids[0]!))!;
    expect(job.data.request).toBeUndefined();
    expect(job.data).toMatchObject({
      digest: requestDigest(requests[0]),
      model: 'claude-test-1',
      requestBytes: Buffer.byteLength(JSON.stringify(requests[0])),
      priority: expect.any(Number),
    });
    const result = await pool.producer.waitForResult(ids[0]!);
    expect(result.message.content[0]).toMatchObject({ type: 'text' });

    // GET answers with the result; the same idempotency key gives the same job, not a new one.
    const got = await call(api, 'GET', `/v1/jobs/${ids[0]}`);
    expect(got.status).toBe(200);
    expect(got.body).toMatchObject({ id: ids[0], state: 'completed', result: { attempts: 1 } });
    expect(got.body.result.message.usage.output_tokens).toBeGreaterThan(0);
    const again = await call(api, 'POST', '/v1/jobs', {
      request: requests[0],
      idempotency_key: 'doc-0',
    });
    expect(again.body).toMatchObject({ id: ids[0], created: false });
    expect(await pool.queue.getJobState(ids[0]!)).toBe('completed');
    expect(pool.mock.stats().attempts).toBe(8);
  });

  it('stores the result once: BullMQ’s completed event carries none, waitForResult reads the job; a job removed on completion gets it from the event', async () => {
    pool = await openPool('held-event', { latencyMs: 5 });
    const { names, redis } = pool;
    const dropping = new Producer({ redis, names, keepCompletedCount: 0 });
    try {
      // The kept job alone first: a second job beside it may wait for the model's first answer
      // (and a job that waited logs why).
      const limiter = { limits: { tokens: 10_000_000 }, windowMs: 2_000 };
      const kept = await pool.producer.enqueue(request('Keep me.', 50));
      const first = await pool.worker({ limiter });
      const result = await pool.producer.waitForResult(kept);
      expect(result.message.content[0]).toMatchObject({ type: 'text' });
      const keptJob = (await pool.job(kept))!;
      expect(keptJob.returnvalue).toEqual(result);
      // Taken once, not held, answered at once: no log lines repeat its result (a closed
      // worker has written all it had to).
      await first.stop();
      const logs = await pool.queue.getJobLogs(kept);
      expect(logs.count, logs.logs.join('\n')).toBe(0);

      // Removed on completion: its waiter, there before a worker takes it, reads the event.
      const dropped = await dropping.enqueue(request('Drop me.', 50));
      const droppedResult = dropping.waitForResult(dropped);
      await pool.worker({ limiter });
      expect((await droppedResult).message.usage.output_tokens).toBeGreaterThan(0);
      expect(await pool.queue.getJob(dropped)).toBeUndefined();

      const events = await redis.xrange(
        `${names.prefix}:{${names.queue}}:${names.queue}:events`,
        '-',
        '+',
      );
      const completions = events
        .map(([, fields]) => fields)
        .filter((f) => f[1] === 'completed')
        .map((f) => ({ id: f[3], returnvalue: f[5] }));
      expect(completions).toContainEqual({ id: kept, returnvalue: 'null' });
      const droppedEvent = completions.find((c) => c.id === dropped);
      expect(JSON.parse(droppedEvent!.returnvalue!)).toMatchObject({ attempts: 1 });
    } finally {
      await dropping.close();
    }
  });

  it('a long answer is stored deflated and read whole: waitForResult, GET /v1/jobs/:id and Bull Board', async () => {
    pool = await openPool('held-long', { latencyMs: 5, outputShare: 1 });
    api = await openApi(pool.names);
    const { names, redis } = pool;
    const sent = await call(api, 'POST', '/v1/jobs', {
      request: request('Write at length.', 4_000),
    });
    const long: string = sent.body.id;
    const short = await pool.producer.enqueue(request('Say hello.', 50));
    await pool.worker({ limiter: { limits: { tokens: 10_000_000 }, windowMs: 2_000 } });
    const result = await pool.producer.waitForResult(long);
    const json = JSON.stringify(result);
    expect(result.message.usage.output_tokens).toBe(4_000);

    const jobKey = (id: string) => `${names.prefix}:{${names.queue}}:${names.queue}:${id}`;
    const stored = (await redis.hget(jobKey(long), 'returnvalue'))!;
    expect(stored).toContain('llmqDeflated');
    expect(stored.length).toBeLessThan(json.length * 0.75);
    // A short one stays plain JSON, as BullMQ and Bull Board show it.
    expect(JSON.parse((await redis.hget(jobKey(short), 'returnvalue'))!)).toMatchObject({
      attempts: 1,
    });

    const got = await call(api, 'GET', `/v1/jobs/${long}`);
    expect(got.body.result).toEqual(result);

    const auth = { token: 'held-board-token-5d' };
    const dashboard = await startDashboard({ redis, prefix: names.prefix, port: 0, auth });
    try {
      const res = await fetch(`${dashboard.baseUrl}/api/queues/${names.queue}/${long}`, {
        headers: { authorization: `Bearer ${auth.token}` },
      });
      const shown = (await res.json()) as { job: { returnValue: unknown } };
      expect(shown.job.returnValue).toEqual(result);
    } finally {
      await dashboard.close();
    }
  });

  it('the results’ bytes bound drops the oldest finished jobs, counts the drop, keeps the newest', async () => {
    pool = await openPool('heldresults', { latencyMs: 5 });
    const maxBytes = 4_000;
    await pool.worker({
      limiter: { limits: { tokens: 10_000_000 }, windowMs: 2_000 },
      resultBounds: { maxBytes },
    });
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) {
      const id = await pool.producer.enqueue(request(`Say hello, number ${i}.`, 20));
      await allCompleted(pool, [id], 15_000);
      ids.push(id);
    }
    const states = await Promise.all(ids.map((id) => pool!.queue.getJobState(id)));
    const left = ids.filter((_, i) => states[i] === 'completed');
    const dropped = ids.length - left.length;
    // The newest are kept, the oldest went, every drop counted; what is kept is under the bound.
    expect(left.length).toBeGreaterThan(0);
    expect(dropped).toBeGreaterThan(0);
    expect(left).toEqual(ids.slice(dropped));
    expect(states.slice(0, dropped).every((s) => s === 'unknown')).toBe(true);
    const metrics = await pool.redis.hget(metricsKey(pool.names), 'results_dropped');
    expect(Number(metrics)).toBe(dropped);
    const held = Number(await pool.redis.hget(llmqKey(pool.names, 'finished', 'bytes'), '*'));
    expect(held).toBeGreaterThan(0);
    expect(held).toBeLessThanOrEqual(maxBytes);
    const last = await pool.producer.waitForResult(ids[5]!);
    expect(last.message.content[0]).toMatchObject({ type: 'text' });
  });

  it('status and /metrics show the bytes held by state against their bounds; a job’s waiting bytes leave as it starts or is cancelled', async () => {
    pool = await openPool('heldshow', { latencyMs: 5 });
    const producer = new Producer({
      redis: pool.redis,
      names: pool.names,
      maxDepthBytes: 10 * 1024 ** 2,
      tenantMaxBytes: 10 * 1024 ** 2,
    });
    const dashboard = await startDashboard({
      redis: pool.redis,
      prefix: pool.names.prefix,
      port: 0,
      auth: { token: TOKEN },
      heldBounds: { waiting: 10 * 1024 ** 2, finished: 1024 ** 2, dead: 2 * 1024 ** 2 },
    });
    try {
      const requests = [0, 1, 2].map((i) => large(i, 100));
      const ids = await Promise.all(requests.map((r) => producer.enqueue(r, { tenant: 'a' })));
      const sizes = depthSizesKey(pool.names);
      const tenantSizes = depthSizesKey(pool.names, 'a');
      const waiting = Number(await pool.redis.hget(sizes, ':total'));
      expect(waiting).toBeGreaterThan(3 * Buffer.byteLength(JSON.stringify(requests[0])));

      const env = pool.cliEnv({ LLMQ_RESULTS_MAX_BYTES: '1mb', LLMQ_DEAD_LETTER_MAX_BYTES: '2mb' });
      const before = await statusOf(env);
      expect(before.held).toMatchObject({ waiting, running: 0, finished: 0, dead: 0 });
      expect(before.held.bounds).toEqual({
        waiting: 1024 ** 3,
        finished: 1024 ** 2,
        dead: 2 * 1024 ** 2,
      });
      const text = await runCli(['status'], env);
      expect(text.stdout).toMatch(
        /redis holds: waiting [\d.]+ KB of 1 GB {2}running 0 B {2}finished 0 B of 1 MB {2}dead 0 B of 2 MB/,
      );

      // A cancelled job's bytes leave at once, the queue's and its tenant's.
      expect(await producer.cancel(ids[0]!)).toBe('cancelled');
      const one = waiting / 3;
      expect(Number(await pool.redis.hget(sizes, ':total'))).toBeLessThan(waiting - one * 0.9);
      expect(Number(await pool.redis.hget(tenantSizes, ':total'))).toBeLessThan(
        waiting - one * 0.9,
      );

      // Started, they no longer wait: nothing is left of them in the hashes, no walk needed.
      await pool.worker({ limiter: { limits: { tokens: 10_000_000 }, windowMs: 2_000 } });
      await allCompleted(pool, ids.slice(1), 15_000);
      await until(async () => Number(await pool!.redis.hget(sizes, ':total')) === 0, 5_000);
      expect(await pool.redis.hkeys(sizes)).toEqual([':total']);
      expect(Number(await pool.redis.hget(tenantSizes, ':total'))).toBe(0);

      const after = await statusOf(env);
      expect(after.held).toMatchObject({ waiting: 0, running: 0, dead: 0 });
      expect(after.held.finished).toBeGreaterThan(0);
      expect(after.held.finished).toBeLessThan(one);

      const res = await fetch(`${dashboard.baseUrl}/metrics`, {
        headers: { authorization: `Bearer ${TOKEN}` },
      });
      const body = await res.text();
      const q = `queue="${pool.names.queue}"`;
      expect(body).toContain(`llmq_redis_bytes{${q},state="waiting"} 0`);
      expect(body).toContain(`llmq_redis_bytes{${q},state="finished"} ${after.held.finished}`);
      expect(body).toContain(`llmq_redis_bytes_bound{${q},state="finished"} ${1024 ** 2}`);
      expect(body).toContain(`llmq_redis_bytes_bound{${q},state="dead"} ${2 * 1024 ** 2}`);
    } finally {
      await dashboard.close();
      await producer.close();
    }
  });
});

const TOKEN = 'held-token-0123456789abcdef';

async function statusOf(env: NodeJS.ProcessEnv) {
  const r = await runCli(['status', '--json'], env);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as QueueStatus;
}
