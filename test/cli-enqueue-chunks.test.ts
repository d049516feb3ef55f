import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openQueue } from '../shared/queues.ts';
import { type PrivateRedis, startRedisServer } from './fixtures/limiter-support.ts';
import { runCli } from './fixtures/worker-harness.ts';
import { deleteKeys, testNames } from './helpers.ts';

// A Redis of the file's own, so its command counts are this file's alone.
let server: PrivateRedis;
let redis: Redis;
const dir = mkdtempSync(join(tmpdir(), 'llmq-chunks-'));
beforeAll(async () => {
  server = await startRedisServer();
  redis = new Redis(server.url);
});
afterAll(async () => {
  redis.disconnect();
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

const line = (text: string) =>
  JSON.stringify({
    model: 'claude-test',
    max_tokens: 20,
    messages: [{ role: 'user', content: text }],
  });

function envFor(names: { queue: string; prefix: string }, maxDepth: number) {
  return {
    ...process.env,
    REDIS_URL: server.url,
    LLMQ_QUEUE: names.queue,
    LLMQ_PREFIX: names.prefix,
    LLMQ_MAX_DEPTH: String(maxDepth),
  };
}

/** Script calls Redis ran (EVAL, EVALSHA), from INFO commandstats. */
async function scriptCalls(): Promise<number> {
  const info = await redis.info('commandstats');
  let n = 0;
  for (const m of info.matchAll(/^cmdstat_(eval|evalsha):calls=(\d+)/gm)) n += Number(m[2]);
  return n;
}

describe('llmq enqueue --file in chunks', () => {
  it('adds 2,500 lines in order under a depth bound with about one script call a line', async () => {
    const names = testNames('chunks');
    const file = join(dir, 'many.jsonl');
    const texts = Array.from({ length: 2_500 }, (_, i) => `line ${i + 1}`);
    writeFileSync(file, texts.map(line).join('\n'));
    await redis.config('RESETSTAT');
    const r = await runCli(['enqueue', '--file', file, '--tenant', 'acme'], envFor(names, 10_000));
    expect(r.code, r.stderr).toBe(0);
    const ids = r.stdout.trim().split('\n');
    expect(new Set(ids).size).toBe(2_500);
    // One job per add (BullMQ's) plus a few per chunk; a round trip per line was 3 a line.
    expect(await scriptCalls()).toBeLessThan(2_500 * 1.2);
    const queue = openQueue(redis, names);
    for (const i of [0, 999, 1_000, 2_499]) {
      const job = await queue.getJob(ids[i]!);
      expect(job?.data.request.messages[0]?.content).toBe(texts[i]);
      expect(job?.data.tenant).toBe('acme');
    }
    expect(await queue.count()).toBe(2_500);
    await queue.close();
    await deleteKeys(redis, names.prefix);
  });

  it('a bad line deep in the file names its line and adds nothing', async () => {
    const names = testNames('chunkbad');
    const lines = Array.from({ length: 1_800 }, (_, i) => line(`line ${i + 1}`));
    lines[1_499] = '{"model": ';
    const badJson = await runCli(['enqueue'], envFor(names, 0), lines.join('\n'));
    expect(badJson.code).not.toBe(0);
    expect(badJson.stderr).toContain('line 1500');
    lines[1_499] = JSON.stringify({ model: 'claude-test', messages: [] });
    const badRequest = await runCli(['enqueue'], envFor(names, 0), lines.join('\n'));
    expect(badRequest.code).not.toBe(0);
    expect(badRequest.stderr).toContain('request 1500');
    expect(badRequest.stdout).toBe('');
    const queue = openQueue(redis, names);
    expect(await queue.count()).toBe(0);
    await queue.close();
    await deleteKeys(redis, names.prefix);
  });

  it('a chunk that does not fit whole still adds the lines that fit, and names the first refused', async () => {
    const names = testNames('chunkfull');
    const env = envFor(names, 3);
    const first = await runCli(['enqueue'], env, line('already there'));
    expect(first.code, first.stderr).toBe(0);
    // The bound is 3 with 1 waiting: the first chunk (3 lines) is refused whole, then 2 fit.
    const r = await runCli(['enqueue'], env, ['a', 'b', 'c', 'd', 'e'].map(line).join('\n'));
    expect(r.code).toBe(1);
    const ids = r.stdout.trim().split('\n');
    expect(ids).toHaveLength(2);
    expect(r.stderr).toContain('the 2 request(s) before request 3 were enqueued');
    const queue = openQueue(redis, names);
    const waiting = await queue.getJobs(['wait', 'prioritized']);
    expect(waiting.map((j) => j.id).sort()).toEqual([first.stdout.trim(), ...ids].sort());
    expect(waiting.map((j) => j.data.request.messages[0]?.content).sort()).toEqual([
      'a',
      'already there',
      'b',
    ]);
    await queue.close();
    await deleteKeys(redis, names.prefix);
  });
});
