import { describe, expect, it } from 'vitest';
import { createProducer } from '../producer/create-producer.ts';
import { Producer } from '../producer/producer.ts';
import { resolveConfig } from '../shared/config.ts';
import { CostExceedsLimitError } from '../shared/errors.ts';
import { readFleetLimits } from '../shared/fleet-limits.ts';
import { type Pool, type Proc, poolsPerTest, request, runCli } from './fixtures/worker-harness.ts';
import { REDIS_URL, until } from './helpers.ts';

const openTestPool = poolsPerTest();

/** Starts `llmq worker …flags` on the pool's queue; resolves once it runs. */
async function worker(pool: Pool, flags: string[]): Promise<Proc> {
  const proc = pool.startCli(['worker', ...flags], pool.cliEnv());
  await Promise.race([
    until(() => proc.stderr().includes('worker started'), 30_000),
    proc.exited().then((code) => {
      throw new Error(`the worker exited (${code}): ${proc.stderr()}`);
    }),
  ]);
  return proc;
}

const stored = async (pool: Pool) => (await readFleetLimits(pool.redis, pool.names))?.limits;

describe("the fleet's limits, stored once for every process", () => {
  it('a worker stores its limits; enqueue, status and `llmq limits` know them without any flag', async () => {
    const pool = await openTestPool('fleet');
    await worker(pool, ['--tpm', '4000', '--window', '10', '--headroom', '0.01']);
    expect(await stored(pool)).toMatchObject({ tpm: 4_000, windowS: 10 });

    const shown = await runCli(['limits', 'show', '--json'], pool.cliEnv());
    expect(shown.code, shown.stderr).toBe(0);
    expect(JSON.parse(shown.stdout).configured.limits).toMatchObject({ tpm: 4_000, windowS: 10 });

    // enqueue knows nothing but the queue: a request over 4,000 tokens (less the headroom) is
    // refused with one line, exit 2, and nothing is added.
    const bad = await runCli(
      ['enqueue'],
      pool.cliEnv(),
      JSON.stringify(request('Too much.', 5_000)),
    );
    expect(bad.code).toBe(2);
    expect(bad.stderr.trim().split('\n')).toHaveLength(1);
    expect(bad.stderr).toMatch(/needs \d+ tokens but scope "global" allows only 3960 per window/);
    expect(await pool.queue.count()).toBe(0);
    // Among many, it is found before any is added.
    const lines = [request('Fine.', 100), request('Too much.', 5_000)].map((r) =>
      JSON.stringify(r),
    );
    const many = await runCli(['enqueue'], pool.cliEnv(), lines.join('\n'));
    expect(many.code).toBe(2);
    expect(many.stderr).toMatch(/^llmq: invalid request: request 2: the request needs/);
    expect(many.stdout).toBe('');
    expect(await pool.queue.count()).toBe(0);

    const status = await runCli(['status'], pool.cliEnv());
    expect(status.stdout).toMatch(
      /limits configured: tpm 4000, window 10 s, headroom 0\.01 \(set by worker on /,
    );
    expect(status.stdout).toContain('limits read: none yet');
    const json = JSON.parse((await runCli(['status', '--json'], pool.cliEnv())).stdout);
    expect(json.limits.configured.limits).toMatchObject({ tpm: 4_000, windowS: 10 });
    expect(json.limits.read).toBeNull();
    expect(json.limiter.windowMs).toBe(10_000);
  });

  it('a worker whose limits differ refuses to start, naming both, until told to replace them', async () => {
    const pool = await openTestPool('fleetclash');
    await worker(pool, ['--tpm', '4000', '--window', '10']);
    const clash = await runCli(['worker', '--tpm', '8000', '--window', '60'], pool.cliEnv());
    expect(clash.code).toBe(2);
    const lines = clash.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('tpm 8000 here, 4000 stored');
    expect(lines[0]).toContain('window 60 s here, 10 s stored');
    expect(lines[0]).toContain('--replace-limits');
    expect(await stored(pool)).toMatchObject({ tpm: 4_000, windowS: 10 });

    await worker(pool, ['--tpm', '8000', '--window', '60', '--replace-limits']);
    expect(await stored(pool)).toMatchObject({ tpm: 8_000, windowS: 60 });
    // The same limits again start without a word.
    await worker(pool, ['--tpm', '8000', '--window', '60']);
  });

  it('a worker without limit flags runs under the stored limits (`llmq limits set`)', async () => {
    const pool = await openTestPool('fleetadopt');
    const set = await runCli(['limits', 'set', '--tpm', '3000', '--window', '5'], pool.cliEnv());
    expect(set.code, set.stderr).toBe(0);
    await worker(pool, []);
    // A producer that does not read the fleet's limits gets a job past them into the queue:
    // the worker, under the stored 3,000, can never admit it and dead-letters it.
    const blind = new Producer({ redis: pool.redis, names: pool.names, fleetLimits: false });
    try {
      await blind.enqueue(request('Past the stored limit.', 3_500));
    } finally {
      await blind.close();
    }
    await until(async () => (await pool.deadLetters()).length === 1, 20_000);
    const [letter] = await pool.deadLetters();
    expect(letter!.errorClass).toBe('CostExceedsLimitError');
    expect(letter!.reason).toContain('allows only 3000 per window');

    const cleared = await runCli(['limits', 'clear'], pool.cliEnv());
    expect(cleared.stdout).toContain('removed the limits');
    expect(await stored(pool)).toBeUndefined();
  });

  it("a producer's own limits cap the fleet's: the lower of each applies", async () => {
    const pool = await openTestPool('fleetcap');
    await runCli(['limits', 'set', '--tpm', '4000', '--headroom', '0'], pool.cliEnv());
    const flags = { queue: pool.names.queue, prefix: pool.names.prefix, redisUrl: REDIS_URL };
    const looser = createProducer(resolveConfig({ flags: { ...flags, tpm: '8000' }, env: {} }));
    const tighter = createProducer(resolveConfig({ flags: { ...flags, tpm: '2000' }, env: {} }));
    try {
      await expect(looser.enqueue(request('Over the fleet.', 4_100))).rejects.toThrow(
        CostExceedsLimitError,
      );
      await looser.enqueue(request('Under the fleet.', 3_900));
      await expect(tighter.enqueue(request('Over my own.', 2_100))).rejects.toThrow(
        /allows only 2000 per window/,
      );
      expect(await pool.queue.count()).toBe(1);
    } finally {
      await Promise.all([looser.close(), tighter.close()]);
    }
  });
});
