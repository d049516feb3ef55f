/**
 * The CLI contract scripts rely on: every queue command takes --queue, --prefix and --config;
 * a file or input error is one line and exit 2; a read command writes nothing to Redis.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { hashApiKey } from '../producer/http/api-keys.ts';
import { buildProgram } from '../scripts/cli/main.ts';
import type { QueueNames } from '../shared/keys.ts';
import { type Proc, request, runCli, startCli } from './fixtures/worker-harness.ts';
import { deleteKeys, newRedis, REDIS_URL, testNames, until } from './helpers.ts';

const redis = newRedis();
const dir = mkdtempSync(join(tmpdir(), 'llmq-contract-'));
let names: QueueNames;
const procs: Proc[] = [];

afterEach(async () => {
  await Promise.all(procs.splice(0).map((p) => p.kill('SIGKILL')));
  await deleteKeys(redis, names.prefix);
});
afterAll(() => {
  redis.disconnect();
  rmSync(dir, { recursive: true, force: true });
});

/** The env of a CLI run: Redis, and no queue, prefix or config of the caller's. */
function env(more: Record<string, string> = {}): NodeJS.ProcessEnv {
  const clean = { ...process.env };
  for (const k of ['LLMQ_QUEUE', 'LLMQ_PREFIX', 'LLMQ_CONFIG', 'LLMQ_API_KEYS']) delete clean[k];
  return { ...clean, REDIS_URL, ...more };
}

/** Every key under the test's prefix, sorted. */
async function keys(): Promise<string[]> {
  const found: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await redis.scan(cursor, 'MATCH', `${names.prefix}:*`, 'COUNT', 1000);
    cursor = next;
    found.push(...batch);
  } while (cursor !== '0');
  return found.sort();
}

describe('every queue command takes --queue, --prefix and --config', () => {
  beforeAll(() => {
    names = testNames('contract');
  });

  const COMMANDS = [
    ['worker'],
    ['enqueue'],
    ['status'],
    ['queues'],
    ['limits', 'show'],
    ['limits', 'set'],
    ['limits', 'clear'],
    ['dlq', 'list'],
    ['dlq', 'show'],
    ['dlq', 'retry'],
    ['dlq', 'purge'],
    ['serve'],
    ['dashboard'],
    ['batch', 'summarize'],
    ['batches', 'run'],
  ];

  it('lists all three in each one’s options', async () => {
    const program = await buildProgram(['node', 'llmq']);
    for (const path of COMMANDS) {
      let cmd = program;
      for (const name of path) cmd = cmd.commands.find((c) => c.name() === name)!;
      const flags = cmd.options.map((o) => o.flags);
      expect(flags, path.join(' ')).toEqual(
        expect.arrayContaining(['--queue <name>', '--prefix <prefix>', '--config <file>']),
      );
    }
  });

  it('serve and batch summarize work on the queue and prefix of a --config file', async () => {
    const config = join(dir, 'llmq.json');
    writeFileSync(config, JSON.stringify({ queue: names.queue, prefix: names.prefix }));
    const doc = join(dir, 'doc.txt');
    writeFileSync(doc, 'A short document about tide pools and the creatures living in them.');
    const out = join(dir, 'out.jsonl');
    const batch = await runCli(
      ['batch', 'summarize', doc, '--out', out, '--no-wait', '--config', config],
      env(),
    );
    expect(batch.code, batch.stderr).toBe(0);
    const key = 'sk-contract-0123456789';
    const serve = startCli(
      ['serve', '--port', '0', '--config', config],
      env({ LLMQ_API_KEYS: `acme:${hashApiKey(key)}` }),
    );
    procs.push(serve);
    await until(() => serve.stdout().includes('http://'), 30_000);
    const url = serve.stdout().split('\n')[0]!;
    const res = await fetch(`${url}/v1/jobs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ request: request('Hello.') }),
    });
    expect(res.status).toBe(202);
    // Both jobs went to the queue the file names, under its prefix.
    const status = await runCli(['status', '--json', '--config', config], env());
    expect(JSON.parse(status.stdout)).toMatchObject({
      queue: names.queue,
      prefix: names.prefix,
      counts: { waiting: 2 },
    });
  });
});

describe('a file or input error is one line and exit 2', () => {
  beforeAll(() => {
    names = testNames('contract');
  });

  it.each([
    ['enqueue', '--file', 'nope.jsonl'],
    ['enqueue', '--file', '/'],
    ['batch', 'summarize', 'README.md', '--out', '/nonexistent-llmq/out.jsonl'],
    ['batch', 'summarize', 'nope-folder/', '--out', join(tmpdir(), 'llmq-never.jsonl')],
    ['status', '--config', 'nope.json'],
    ['serve', '--api-keys-file', 'nope.txt'],
  ])('llmq %s %s %s', async (...args) => {
    const r = await runCli(args, env({ LLMQ_PREFIX: names.prefix, LLMQ_QUEUE: names.queue }));
    expect(r.code).toBe(2);
    const lines = r.stderr.trim().split('\n');
    expect(lines, r.stderr).toHaveLength(1);
    expect(lines[0]).toMatch(/^llmq: /);
    expect(lines[0]).not.toMatch(/\bat \S+:\d+/);
  });

  it('a bad line of JSON Lines names the line, and nothing is enqueued', async () => {
    const r = await runCli(
      ['enqueue', '--queue', names.queue, '--prefix', names.prefix],
      env(),
      `${JSON.stringify(request())}\n{"model": \n`,
    );
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^llmq: invalid request: line 2: not valid JSON/);
    expect(await keys()).toEqual([]);
  });
});

describe('read commands write nothing to Redis', () => {
  beforeAll(() => {
    names = testNames('contract');
  });

  const READS = [
    ['status'],
    ['status', '--json'],
    ['queues'],
    ['limits'],
    ['limits', 'show', '--json'],
    ['dlq', 'list'],
    ['dlq', 'show', 'no-such-id'],
  ];

  it('on a queue that does not exist', async () => {
    const flags = ['--queue', 'does-not-exist', '--prefix', names.prefix];
    for (const read of READS) await runCli([...read, ...flags], env());
    expect(await keys()).toEqual([]);
    const status = await runCli(['status', ...flags], env());
    expect(status.code).toBe(0);
    expect(status.stderr).toMatch(/no queue "does-not-exist" is registered under prefix/);
  });

  it('on a queue with a job and stored limits: the same keys after as before', async () => {
    const flags = ['--queue', names.queue, '--prefix', names.prefix];
    await runCli(['limits', 'set', '--tpm', '5000', ...flags], env());
    const added = await runCli(['enqueue', ...flags], env(), JSON.stringify(request()));
    expect(added.code, added.stderr).toBe(0);
    const before = await keys();
    expect(before.length).toBeGreaterThan(3);
    for (const read of READS) {
      const r = await runCli([...read, ...flags], env());
      expect(r.code, `${read.join(' ')}: ${r.stderr}`).toBe(
        read[1] === 'show' && read[0] === 'dlq' ? 2 : 0,
      );
    }
    expect(await keys()).toEqual(before);
  });
});
