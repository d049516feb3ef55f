import { afterEach, describe, expect, it } from 'vitest';
import type { RedisClient } from '../shared/redis.ts';
import { HeadPeeker } from '../worker/bullmq-internals.ts';
import { type PrivateRedis, startRedisServer } from './fixtures/limiter-support.ts';
import { allCompleted, openPool, type Pool, request } from './fixtures/worker-harness.ts';

let pool: Pool | undefined;
let server: PrivateRedis | undefined;
afterEach(async () => {
  await pool?.cleanup();
  pool = undefined;
  await server?.stop();
  server = undefined;
});

/** One job for each of `count` tenants (`s0000`…), 50 enqueues at a time. */
async function enqueueSingles(p: Pool, count: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i += 50) {
    const names = Array.from({ length: Math.min(50, count - i) }, (_, j) => `s${i + j}`);
    ids.push(
      ...(await Promise.all(
        names.map((t) => p.producer.enqueue(request(`${t}.`, 20), { tenant: t })),
      )),
    );
  }
  return ids;
}

/** Commands Redis ran since its stats were reset, those run inside scripts included. */
async function commandsRun(redis: RedisClient): Promise<number> {
  const info = await redis.info('commandstats');
  let n = 0;
  for (const m of info.matchAll(/^cmdstat_([\w|]+):calls=(\d+)/gm)) {
    if (!/^(evalsha|eval|info|config|script|client|hello|ping|select)$/.test(m[1]!)) {
      n += Number(m[2]);
    }
  }
  return n;
}

describe("fair share's index", () => {
  it('finds the heads of tenants behind 2,000 jobs in one peek of a few dozen commands, with 2,000 tenants waiting', async () => {
    server = await startRedisServer();
    pool = await openPool('fair-index-peek', {}, {}, { redisUrl: server.url });
    const first: string[] = [];
    for (let i = 0; i < 2_000; i += 500) {
      const chunk = Array.from({ length: 500 }, (_, j) => request(`first ${i + j}.`, 20));
      first.push(...(await pool.producer.enqueueMany(chunk, { tenant: 'first' })));
    }
    await enqueueSingles(pool, 2_000);
    const peeker = new HeadPeeker(pool.redis, pool.names);
    await peeker.peekMany(10, 10); // the script loaded
    await pool.redis.config('RESETSTAT');
    const heads = await peeker.peekMany(10, 10);
    const commands = await commandsRun(pool.redis);

    // BullMQ's head first; then other tenants' first jobs, from behind 2,000 of first's.
    expect(heads[0]!.id).toBe(first[0]);
    const others = new Set(heads.map((h) => h.tenant).filter((t) => t !== 'first'));
    expect(others.size).toBeGreaterThanOrEqual(10);
    // A scan of the queue would read 2,000 jobs or more; the index reads about 2 per job wanted
    // and 1 per tenant looked at.
    expect(commands).toBeLessThan(200);
  }, 120_000);

  it("keeps weights, and serves 2,000 tenants' single jobs before a heavy tenant's backlog", async () => {
    pool = await openPool('fair-index-weights');
    const ids: string[] = [];
    for (let i = 0; i < 40; i++) {
      ids.push(await pool.producer.enqueue(request(`a ${i}`, 40), { tenant: 'a' }));
      ids.push(await pool.producer.enqueue(request(`b ${i}`, 40), { tenant: 'b' }));
    }
    const singles = await enqueueSingles(pool, 2_000);
    const worker = await pool.worker({ concurrency: 8, fairShare: { weights: { b: 3 } } });
    await allCompleted(pool, [...ids, ...singles], 110_000);
    const jobs = await Promise.all(ids.map(async (id) => (await pool!.job(id))!));
    const starts = (t: string) =>
      jobs
        .filter((j) => j.data.tenant === t)
        .map((j) => j.processedOn!)
        .sort((x, y) => x - y);
    // Every tenant with one job had its turn before a's backlog was through, though all of
    // theirs were behind all of a's in the queue.
    const lastOfA = starts('a').at(-1)!;
    const singleJobs = await Promise.all(singles.map(async (id) => (await pool!.job(id))!));
    expect(singleJobs.filter((j) => j.processedOn! > lastOfA)).toEqual([]);
    // While both have work (until b's 30th start of 40), b had three quarters of a and b's tokens.
    const cutoff = starts('b')[29]!;
    const tokens = { a: 0, b: 0 };
    for (const j of jobs) {
      if (j.processedOn! > cutoff) continue;
      const u = j.returnvalue.message.usage;
      tokens[j.data.tenant as 'a' | 'b'] += u.input_tokens + u.output_tokens;
    }
    const share = tokens.b / (tokens.a + tokens.b);
    expect(share).toBeGreaterThanOrEqual(0.65);
    expect(share).toBeLessThanOrEqual(0.85);
    await worker.stop(1_000);
  }, 120_000);
});
