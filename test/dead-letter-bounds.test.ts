import { describe, expect, it } from 'vitest';
import { hashApiKey } from '../producer/http/api-keys.ts';
import { startHttpApi } from '../producer/http/server.ts';
import { Producer } from '../producer/producer.ts';
import { resolveConfig } from '../shared/config.ts';
import { QueueFullError } from '../shared/errors.ts';
import { JOB_NAME } from '../shared/job.ts';
import { metricsKey } from '../shared/metrics.ts';
import { countMockTokens } from '../testing/mock-anthropic/index.ts';
import { deadLetterHeld, keepDeadLetter } from '../worker/dead-letter-bounds.ts';
import { listDeadLetters, purgeDeadLetters, showDeadLetter } from '../worker/dead-letters.ts';
import {
  allCompleted,
  type Pool,
  poolsPerTest,
  request,
  runCli,
} from './fixtures/worker-harness.ts';
import { REDIS_URL, until } from './helpers.ts';

const openTestPool = poolsPerTest();

/** A request of about `kb` KB of text, its own for each `i`. */
const large = (i: number, kb = 40) =>
  request(
    Array.from({ length: kb * 32 }, (_, n) => `line ${i}.${n} of a refused report. `).join(''),
    20,
  );

const letterBytes = (r: unknown) => Buffer.byteLength(JSON.stringify(r));

/** Enqueues each request in turn and waits for it to be dead-lettered, so they die in order. */
async function deadInTurn(
  p: Pool,
  requests: readonly unknown[],
  tenants: readonly (string | undefined)[] = [],
): Promise<string[]> {
  const ids: string[] = [];
  for (const [i, r] of requests.entries()) {
    const tenant = tenants[i];
    const id = await p.producer.enqueue(r, { attempts: 5, ...(tenant ? { tenant } : {}) });
    await until(async () => (await p.queue.getJobState(id)) === 'failed', 15_000);
    ids.push(id);
  }
  return ids;
}

describe('dead letters are bounded', () => {
  it('by the queue’s bytes: the oldest go, the drop is counted, a kept letter retries with its full request', async () => {
    const pool = await openTestPool('dlbytes', { spendCappedKeys: ['sk-capped'] });
    const requests = [0, 1, 2, 3].map((i) => large(i));
    const one = letterBytes(requests[0]);
    const capped = await pool.worker({
      apiKey: 'sk-capped',
      limiter: { windowMs: 5_000, limits: { tokens: 10_000_000 } },
      deadLetterBounds: { maxAgeMs: 0, maxBytes: Math.round(one * 2.5), tenantMaxBytes: 0 },
    });
    const ids = await deadInTurn(pool, requests);

    // The two newest fit under 2.5 letters' bytes; the two oldest were dropped, and counted.
    expect((await listDeadLetters(pool.dlq)).map((l) => l.id)).toEqual(ids.slice(2));
    const held = await deadLetterHeld(pool.dlq);
    expect(held.bytes).toBeLessThanOrEqual(one * 2.5);
    expect(held.bytes).toBeGreaterThan(one * 2);
    expect(held).toMatchObject({ dropped: 2 });
    expect(held.droppedBytes).toBeGreaterThan(one * 2);
    expect(await pool.redis.hget(metricsKey(pool.names), 'dead_letters_dropped')).toBe('2');

    // Stored once: each failed job keeps only its request's record; the letter keeps the request.
    for (const id of ids) expect((await pool.job(id))!.data.request).toBeUndefined();
    expect((await showDeadLetter(pool.dlq, ids[3]!))!.data.request).toEqual(requests[3]);

    // `llmq dlq list` says what was dropped; `llmq dlq retry` runs the kept one in full.
    await capped.stop();
    const env = pool.cliEnv();
    const list = await runCli(['dlq', 'list'], env);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toMatch(/2 dropped by the bounds \(.+, oldest first\)/);
    const retried = await runCli(['dlq', 'retry', ids[3]!], env);
    expect(retried.code, retried.stderr).toBe(0);
    expect(retried.stdout.trim()).toBe(ids[3]);
    await pool.worker({ limiter: { windowMs: 5_000, limits: { tokens: 10_000_000 } } });
    await allCompleted(pool, [ids[3]!], 15_000);
    const result = (await pool.job(ids[3]!))!.returnvalue;
    expect(result.message.usage.input_tokens).toBe(countMockTokens(requests[3]));
    // The retried letter no longer counts; a dropped one cannot be retried.
    expect((await deadLetterHeld(pool.dlq)).bytes).toBeLessThan(one * 1.5);
    const gone = await runCli(['dlq', 'retry', ids[0]!], env);
    expect(gone.code).not.toBe(0);
    expect(gone.stderr).toMatch(/no dead letter with id/);
  });

  it('by a tenant’s bytes: that tenant’s oldest go, another tenant’s stay', async () => {
    const pool = await openTestPool('dltenant', { spendCappedKeys: ['sk-capped'] });
    const requests = [0, 1, 2, 3].map((i) => large(i));
    const one = letterBytes(requests[0]);
    await pool.worker({
      apiKey: 'sk-capped',
      limiter: { windowMs: 5_000, limits: { tokens: 10_000_000 } },
      deadLetterBounds: { maxAgeMs: 0, maxBytes: 0, tenantMaxBytes: Math.round(one * 1.5) },
    });
    const ids = await deadInTurn(pool, requests, ['b', 'a', 'a', 'a']);

    expect((await listDeadLetters(pool.dlq)).map((l) => l.id)).toEqual([ids[0], ids[3]]);
    const held = await deadLetterHeld(pool.dlq);
    expect(held.dropped).toBe(2);
    expect(held.tenants['a']).toBeLessThanOrEqual(one * 1.5);
    expect(held.tenants['b']).toBeGreaterThan(one);
  });

  it('by age: letters older than the bound go when the next is kept, and are counted', async () => {
    const pool = await openTestPool('dlage');
    const bounds = { maxAgeMs: 60_000, maxBytes: 0, tenantMaxBytes: 0 };
    const add = async (id: string, at: number) => {
      await pool!.dlq.add(JOB_NAME, { jobId: id } as never, { jobId: id });
      return keepDeadLetter(pool!.dlq, { id, bytes: 1_000, tenant: undefined }, bounds, at);
    };
    expect(await add('old', 1_000_000)).toEqual([]);
    expect(await add('mid', 1_030_000)).toEqual([]);
    // At 1 070 000, `old` (kept at 1 000 000) is past 60 s; `mid` is not.
    expect(await add('new', 1_070_000)).toEqual(['old']);
    expect(await pool.dlq.getJob('old')).toBeUndefined();
    expect((await pool.dlq.getJobs(['wait'])).map((j) => j.id).sort()).toEqual(['mid', 'new']);
    expect(await deadLetterHeld(pool.dlq)).toMatchObject({
      bytes: 2_000,
      dropped: 1,
      droppedBytes: 1_000,
    });
  });

  it('a tenant’s max-bytes counts its dead letters with what waits: full, it is refused, another tenant is not', async () => {
    const pool = await openTestPool('dlmax', { spendCappedKeys: ['sk-capped'] });
    const requests = [0, 1, 2, 3].map((i) => large(i));
    const one = letterBytes(requests[0]);
    const producer = new Producer({
      redis: pool.redis,
      names: pool.names,
      tenantMaxBytes: Math.round(one * 2.5),
    });
    try {
      await pool.worker({
        apiKey: 'sk-capped',
        limiter: { windowMs: 5_000, limits: { tokens: 10_000_000 } },
      });
      const dead = await Promise.all(
        requests.slice(0, 2).map((r) => producer.enqueue(r, { tenant: 'a', attempts: 5 })),
      );
      await until(async () => (await listDeadLetters(pool!.dlq)).length === 2, 15_000);
      expect((await deadLetterHeld(pool.dlq)).tenants['a']).toBeGreaterThan(one * 2);

      // Nothing of tenant a waits, but its dead letters fill its bytes: refused, with what to do.
      const refused = await producer.enqueue(requests[2], { tenant: 'a' }).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(QueueFullError);
      expect((refused as QueueFullError).message).toMatch(
        /tenant "a" of queue ".+" is full \(0 B of requests waiting and .+ of dead letters, bound .+\).*purge its dead letters/,
      );
      // Tenant b is taken as before.
      await expect(producer.enqueue(requests[3], { tenant: 'b' })).resolves.toEqual(
        expect.any(String),
      );
      // Once its letters are purged, tenant a is taken again.
      expect(await purgeDeadLetters(pool.dlq)).toBe(2);
      expect((await deadLetterHeld(pool.dlq)).tenants['a']).toBeUndefined();
      await expect(producer.enqueue(requests[2], { tenant: 'a' })).resolves.toEqual(
        expect.any(String),
      );
      expect(dead).toHaveLength(2);
    } finally {
      await producer.close();
    }
  });

  it('through the job API: a tenant whose dead letters fill its max-bytes gets 429, another gets 202', async () => {
    const pool = await openTestPool('dlapi', { spendCappedKeys: ['sk-capped'] });
    const requests = [0, 1, 2, 3].map((i) => large(i));
    const one = letterBytes(requests[0]);
    const bound = `${Math.round((one * 2.5) / 1024)}kb`;
    const api = await startHttpApi({
      config: resolveConfig({
        flags: { queue: pool.names.queue, prefix: pool.names.prefix, redisUrl: REDIS_URL },
        env: {},
      }),
      apiKeys: [
        `acme:${hashApiKey(ACME)} max-bytes=${bound}`,
        `beta:${hashApiKey(BETA)} max-bytes=${bound}`,
      ].join(','),
      port: 0,
    });
    const post = async (key: string, request: unknown) => {
      const res = await fetch(`${api.url}/v1/jobs`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ request }),
      });
      // biome-ignore lint/suspicious/noExplicitAny: a JSON body read by the test
      return { status: res.status, body: (await res.json()) as any };
    };
    try {
      await pool.worker({
        apiKey: 'sk-capped',
        limiter: { windowMs: 5_000, limits: { tokens: 10_000_000 } },
      });
      for (const r of requests.slice(0, 2)) expect((await post(ACME, r)).status).toBe(202);
      await until(async () => (await listDeadLetters(pool!.dlq)).length === 2, 15_000);

      const full = await post(ACME, requests[2]);
      expect(full.status).toBe(429);
      expect(full.body.error.code).toBe('queue_full');
      expect(full.body.error.message).toMatch(/of dead letters/);
      expect((await post(BETA, requests[3])).status).toBe(202);
      // Redis holds no more of acme's requests than its bound: nothing waits, its letters fit.
      expect((await deadLetterHeld(pool.dlq)).tenants['acme']).toBeLessThanOrEqual(one * 2.5);
    } finally {
      await api.close();
    }
  });
});

const ACME = 'sk-dl-acme-0123456789';
const BETA = 'sk-dl-beta-0123456789';
