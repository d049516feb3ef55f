import { describe, expect, it } from 'vitest';
import { estimateInputTokens } from '../shared/estimate.ts';
import type { MessagesRequest } from '../shared/request.ts';
import { countMockTokens } from '../testing/mock-anthropic/index.ts';
import {
  allCompleted,
  poolsPerTest,
  request,
  runCli,
  startCli,
} from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const openTestPool = poolsPerTest();

describe('one job end to end', () => {
  it('stores the result with the provider’s usage, stop reason, request id and latency', async () => {
    const pool = await openTestPool('one', { latencyMs: 60, outputShare: 0.5 });
    const req = request('Write one short sentence about queues, please.', 40);
    const id = await pool.producer.enqueue(req);
    const worker = await pool.worker({ limiter: { limits: { tokens: 10_000 }, windowMs: 2_000 } });
    await allCompleted(pool, [id], 15_000);

    const job = (await pool.job(id))!;
    const result = job.returnvalue;
    // The mock's tokenizer counts fewer tokens than llmq's estimate, which errs high: the
    // stored usage is the provider's count, not what was reserved.
    const counted = countMockTokens(req);
    expect(job.data.cost.inputTokens).toBe(estimateInputTokens(req as MessagesRequest));
    expect(counted).toBeLessThan(job.data.cost.inputTokens);
    expect(result.message.usage.input_tokens).toBe(counted);
    expect(result.message.usage.output_tokens).toBe(20);
    expect(result.message.stop_reason).toBe('end_turn');
    expect(result.message.model).toBe('claude-test-1');
    expect(result.message.content).toEqual([{ type: 'text', text: expect.any(String) }]);
    expect(result.requestId).toMatch(/^req_/);
    expect(result.latencyMs).toBeGreaterThanOrEqual(55);
    expect(result.attempts).toBe(1);
    expect(pool.mock.stats()).toMatchObject({ attempts: 1, admitted: 1 });

    // The window was reconciled with the provider's count, and the slot given back.
    await until(async () => (await worker.limiter.snapshot()).counters.settled === 1, 5_000);
    const lim = await worker.limiter.snapshot();
    expect(lim.counters.actualIn).toBe(counted);
    expect(lim.inFlight).toBe(0);
  });

  it('runs through the CLI: worker, enqueue from stdin, status --json, SIGTERM exits 0', async () => {
    const pool = await openTestPool('onecli', { latencyMs: 20 });
    const env = pool.cliEnv({ LLMQ_TPM: '20000', LLMQ_WINDOW_S: '2' });
    const worker = startCli(['worker'], env);
    try {
      const enq = await runCli(
        ['enqueue'],
        env,
        JSON.stringify(request('Hello from the CLI.', 30)),
      );
      expect(enq.stderr).toBe('');
      expect(enq.code).toBe(0);
      const id = enq.stdout.trim();
      expect(id).toMatch(/^\S+$/);

      await allCompleted(pool, [id], 30_000);
      const status = await runCli(['status', '--json'], env);
      expect(status.code, status.stderr).toBe(0);
      const parsed = JSON.parse(status.stdout) as { counts: Record<string, number> };
      expect(parsed.counts).toMatchObject({
        waiting: 0,
        active: 0,
        delayed: 0,
        completed: 1,
        failed: 0,
        dead: 0,
      });
      expect((await pool.job(id))!.returnvalue.message.usage.input_tokens).toBeGreaterThan(0);

      expect(await worker.kill('SIGTERM'), worker.stderr()).toBe(0);
    } finally {
      await worker.kill('SIGKILL');
    }
  });

  it('refuses an invalid request through the CLI with exit 2 and one line naming the field', async () => {
    const pool = await openTestPool('onebad');
    const env = pool.cliEnv();
    const bad = { ...request(), max_tokens: 0 };
    const r = await runCli(['enqueue'], env, JSON.stringify(bad));
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    const lines = r.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('max_tokens');
    expect(await pool.counts()).toMatchObject({ wait: 0, prioritized: 0, active: 0, delayed: 0 });
    // Opening a queue writes its meta key; nothing else (no job, no id counter) was written.
    const keys = await pool.redis.keys(`${pool.names.prefix}:*`);
    expect(keys.filter((k) => !k.endsWith(':meta'))).toEqual([]);
  });

  it('says in one line which Redis it could not reach, and exits non-zero', async () => {
    const pool = await openTestPool('oneredis');
    const url = 'redis://127.0.0.1:1';
    const commands = [['enqueue'], ['status', '--json'], ['worker']];
    const env = pool.cliEnv({ REDIS_URL: url });
    const runs = await Promise.all(
      commands.map((args) => runCli(args, env, JSON.stringify(request()))),
    );
    for (const [i, r] of runs.entries()) {
      const args = commands[i]!;
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).not.toBe(0);
      const lines = r.stderr.trim().split('\n');
      expect(lines, args.join(' ')).toHaveLength(1);
      expect(lines[0]).toContain(url);
      expect(r.stdout).toBe('');
    }
  });
});
