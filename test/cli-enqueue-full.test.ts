import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openQueue } from '../shared/queues.ts';
import { runCli, startCli } from './fixtures/worker-harness.ts';
import { deleteKeys, newRedis, REDIS_URL, testNames } from './helpers.ts';

const names = testNames('cliful');
const dir = mkdtempSync(join(tmpdir(), 'llmq-enqueue-'));
let redis: Redis;
beforeAll(() => {
  redis = newRedis();
});
afterAll(async () => {
  await deleteKeys(redis, names.prefix);
  redis.disconnect();
  rmSync(dir, { recursive: true, force: true });
});

const env = {
  ...process.env,
  REDIS_URL,
  LLMQ_QUEUE: names.queue,
  LLMQ_PREFIX: names.prefix,
  LLMQ_MAX_DEPTH: '2',
};
const line = (text: string) =>
  JSON.stringify({
    model: 'claude-test',
    max_tokens: 20,
    messages: [{ role: 'user', content: text }],
  });

describe('llmq enqueue into a full queue', () => {
  it('names --wait, and says the lines before the refused one were enqueued', async () => {
    const r = await runCli(['enqueue'], env, [line('a'), line('b'), line('c')].join('\n'));
    expect(r.code).toBe(1);
    const ids = r.stdout.trim().split('\n');
    expect(ids).toHaveLength(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain(`queue "${names.queue}" is full (2 waiting, bound 2)`);
    expect(r.stderr).toContain('pass --wait to wait for room');
    expect(r.stderr).toContain('the 2 request(s) before request 3 were enqueued');
    expect(r.stderr).not.toContain('{ wait: true }');
    const queue = openQueue(redis, names);
    expect((await queue.getJobs(['wait', 'prioritized'])).map((j) => j.id).sort()).toEqual(
      [...ids].sort(),
    );

    // --wait holds on while the queue is full (a second enqueue, started after it, is refused
    // meanwhile), then adds and prints the id once a job leaves.
    const file = join(dir, 'one.jsonl');
    writeFileSync(file, line('e'));
    const waiting = startCli(['enqueue', '--wait', '--file', file], env);
    const again = await runCli(['enqueue'], env, line('d'));
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('nothing was enqueued');
    expect(waiting.child.exitCode).toBeNull();
    await queue.remove(ids[0]!);
    expect(await waiting.exited()).toBe(0);
    const added = waiting.stdout().trim();
    expect(await queue.getJob(added)).toBeDefined();
    await queue.close();
  });

  it('says so in --help', async () => {
    const r = await runCli(['enqueue', '--help'], env);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('--wait');
    expect(r.stdout.replace(/\s+/g, ' ')).toContain('the lines before that one were enqueued');
  });
});

describe('llmq enqueue --retry-for', () => {
  const own = testNames('cliretry');
  const ownEnv = { ...env, LLMQ_QUEUE: own.queue, LLMQ_PREFIX: own.prefix, LLMQ_MAX_DEPTH: '0' };
  afterAll(async () => {
    await deleteKeys(redis, own.prefix);
  });

  it('gives the jobs their own retryFor; a bad duration adds nothing and names the flag', async () => {
    const r = await runCli(['enqueue', '--retry-for', '30m'], ownEnv, line('patient'));
    expect(r.code, r.stderr).toBe(0);
    const queue = openQueue(redis, own);
    const job = await queue.getJob(r.stdout.trim());
    expect(job?.data.retryForMs).toBe(1_800_000);
    // Without the flag the job carries none (LLMQ_RETRY_FOR is the worker's setting).
    const plain = await runCli(['enqueue'], { ...ownEnv, LLMQ_RETRY_FOR: '1m' }, line('plain'));
    expect((await queue.getJob(plain.stdout.trim()))?.data.retryForMs).toBeUndefined();

    const bad = await runCli(['enqueue', '--retry-for', 'soon'], ownEnv, line('never'));
    expect(bad.code).toBe(2); // a usage error
    expect(bad.stderr.trim()).toBe(
      'llmq: --retry-for must be a duration such as 90s, 10m or 2h (at most 7d; 0 makes transient failures spend attempts), got "soon"',
    );
    expect(await queue.count()).toBe(2);
    await queue.close();
  });
});
