import { afterEach, describe, expect, it } from 'vitest';
import { callProvider, createProviderClient } from '../worker/provider.ts';
import { API_KEY, allCompleted, openPool, type Pool, request } from './fixtures/worker-harness.ts';
import { newRedis, until } from './helpers.ts';

let pool: Pool | undefined;
let conn: ReturnType<typeof newRedis> | undefined;
afterEach(async () => {
  await pool?.cleanup();
  pool = undefined;
  await conn?.quit().catch(() => conn?.disconnect());
  conn = undefined;
});

describe('after a successful call', () => {
  it('gives the slot back at once when the usage cannot be counted, and keeps the estimate charged', async () => {
    pool = await openPool('oddusage');
    const client = createProviderClient({ apiKey: API_KEY, baseURL: pool.mock.url });
    const warnings: string[] = [];
    const worker = await pool.worker({
      // One call at a time, on a long lease: a slot not given back would hold the next job for 60 s.
      limiter: { windowMs: 60_000, limits: { tokens: 100_000 }, leaseMs: 60_000 },
      concurrency: 1,
      maxInFlight: 1,
      // The real call to the mock, its usage made fractional, as a provider's bug might.
      provider: async (req, o) => {
        const res = await callProvider(client, req, o);
        const usage = { ...res.message.usage, input_tokens: res.message.usage.input_tokens + 0.5 };
        return { ...res, message: { ...res.message, usage } };
      },
      logger: { info() {}, warn: (m, f) => warnings.push(`${m} ${JSON.stringify(f)}`) },
    });
    const ids = await Promise.all(
      [1, 2, 3].map((i) => pool!.producer.enqueue(request(`Job ${i}.`))),
    );
    await allCompleted(pool, ids, 15_000);
    expect(pool.mock.stats().attempts).toBe(3);
    const refused = () => warnings.filter((w) => w.includes('must be a whole number of tokens'));
    await until(() => refused().length === 3, 5_000);
    const snap = await worker.limiter.snapshot();
    expect(snap.inFlight).toBe(0);
    // Kept: each call's estimate stays charged as it was (its max_tokens among it), nothing
    // reconciled.
    expect(snap.counters.settled).toBe(3);
    expect(snap.counters.actualIn).toBe(snap.counters.settledReservedIn);
    expect(snap.scopes.find((s) => s.scope === 'global')?.dimensions.outputTokens.used).toBe(150);
  });

  it('stores the result once and never calls again, even when the limiter’s Redis goes away', async () => {
    pool = await openPool('aftersuccess', { latencyMs: 800 });
    const id = await pool.producer.enqueue(request('Only once, please.'));
    // Short locks and leases, so a job left active would be recovered, and called again, by
    // the second worker within seconds.
    const short = { lockDurationMs: 1_000, stalledIntervalMs: 500 };
    const limiter = { windowMs: 5_000, limits: { tokens: 100_000 }, leaseMs: 1_000 };
    conn = newRedis();
    try {
      await pool.worker({ redis: conn, ...short, limiter });
      await until(() => pool!.mock.stats().admitted === 1, 10_000, 5);
      // The call is under way; the connection the limiter, breaker and metrics use goes away
      // (BullMQ's own connection stays).
      conn.disconnect();
      await pool.worker({ ...short, limiter });

      await allCompleted(pool, [id], 15_000);
      // Long enough for a stalled job to be recovered and called again.
      await new Promise((r) => setTimeout(r, 2_500));
      expect(pool.mock.stats().attempts).toBe(1);
      const job = (await pool.job(id))!;
      expect(await pool.queue.getJobState(id)).toBe('completed');
      expect(job.returnvalue.attempts).toBe(1);
      expect(job.attemptsStarted).toBe(1);
    } finally {
      // Back for the worker's own shutdown.
      await conn.connect().catch(() => {});
    }
  });
});
