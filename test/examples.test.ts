/**
 * The examples a user copies: every ```ts or ```js block of README.md and docs/*.md that imports
 * from 'llmq' is a program. Each is type-checked as a user's ES module project would (the project's
 * strict options, `llmq` resolved to this checkout's sources) and run against the mock provider
 * and the test Redis, with its own prefix and queue; one that does not type-check, fails, or
 * does not exit on its own (an open connection) fails here.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MockAnthropicHandle, startMockAnthropic } from '../testing/index.ts';
import { allExamples, type Example, readmeLibraryExample } from './fixtures/doc-examples.ts';
import { deleteKeys, newRedis, REDIS_URL, testNames } from './helpers.ts';

const ROOT = new URL('../', import.meta.url).pathname;
/** How long an example may run before it counts as hanging. */
const EXIT_WITHIN_MS = 60_000;

const examples = allExamples();
const fileOf = (e: Example) => `${e.where.replace(/[/:.]/g, '-')}.ts`;

let dir: string;
let mock: MockAnthropicHandle;
let redis: Redis;
const prefixes: string[] = [];

beforeAll(async () => {
  // A user's project: an ES module package, its own tsconfig, llmq resolved to the sources.
  dir = mkdtempSync(join(tmpdir(), 'llmq-examples-'));
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
  writeFileSync(
    join(dir, 'package.json'),
    '{ "name": "examples", "private": true, "type": "module" }\n',
  );
  writeFileSync(
    join(dir, 'tsconfig.json'),
    JSON.stringify({
      extends: join(ROOT, 'tsconfig.json'),
      compilerOptions: {
        paths: { llmq: [join(ROOT, 'index.ts')], 'llmq/testing': [join(ROOT, 'testing/index.ts')] },
        typeRoots: [join(ROOT, 'node_modules/@types')],
      },
      include: ['*.ts'],
    }),
  );
  for (const e of examples) writeFileSync(join(dir, fileOf(e)), `${e.code}\n`);
  mock = await startMockAnthropic({});
  redis = newRedis();
});

afterAll(async () => {
  await mock?.close();
  if (redis) {
    for (const p of prefixes) await deleteKeys(redis, p);
    redis.disconnect();
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Runs one example with tsx; resolves with its exit code (null when killed) and its output. */
function run(e: Example, env: NodeJS.ProcessEnv) {
  return new Promise<{ code: number | null; out: string; stderr: string; hung: boolean }>(
    (resolve) => {
      const child = spawn(process.execPath, ['--import', 'tsx', fileOf(e)], {
        cwd: dir,
        env: { ...env, TSX_TSCONFIG_PATH: join(dir, 'tsconfig.json') },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      let stderr = '';
      child.stdout.on('data', (d) => (out += d));
      child.stderr.on('data', (d) => {
        out += d;
        stderr += d;
      });
      let hung = false;
      const timer = setTimeout(() => {
        hung = true;
        child.kill('SIGKILL');
      }, EXIT_WITHIN_MS);
      child.on('exit', (code) => {
        clearTimeout(timer);
        resolve({ code, out, stderr, hung });
      });
    },
  );
}

/** The env of an example run on a queue of its own, against `provider` (a mock's URL). */
function exampleEnv(provider: string): NodeJS.ProcessEnv {
  const names = testNames('example');
  prefixes.push(names.prefix);
  return {
    ...process.env,
    REDIS_URL,
    LLMQ_PREFIX: names.prefix,
    LLMQ_QUEUE: names.queue,
    ANTHROPIC_API_KEY: 'sk-test',
    ANTHROPIC_BASE_URL: provider,
  };
}

/** How many keys Redis holds under an example's prefix. */
async function keysUnder(prefix: string): Promise<number> {
  let cursor = '0';
  let n = 0;
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
    cursor = next;
    n += keys.length;
  } while (cursor !== '0');
  return n;
}

describe('the examples of the README and docs/', () => {
  it('finds the programs: the README has at least its library and testing examples', () => {
    expect(examples.filter((e) => e.where.startsWith('README.md:')).length).toBeGreaterThanOrEqual(
      2,
    );
  });

  it('every example type-checks', () => {
    const tsc = join(ROOT, 'node_modules/typescript/bin/tsc');
    const r = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.json'], {
      cwd: dir,
      encoding: 'utf8',
    });
    // Name the example, not the temporary file.
    const out = `${r.stdout}${r.stderr}`.replace(/^([\w-]+)\.ts\b/gm, (f) => {
      const e = examples.find((x) => fileOf(x) === f);
      return e ? e.where : f;
    });
    expect(out.trim()).toBe('');
    expect(r.status).toBe(0);
  }, 120_000);

  for (const e of examples) {
    it(
      `${e.where} runs against the mock and exits on its own`,
      async () => {
        const r = await run(e, exampleEnv(mock.url));
        expect(r.hung, `${e.where} did not exit within ${EXIT_WITHIN_MS} ms:\n${r.out}`).toBe(
          false,
        );
        expect(r.code, r.out).toBe(0);
      },
      EXIT_WITHIN_MS + 10_000,
    );
  }
});

describe("the README's library example", () => {
  const library = readmeLibraryExample();

  it('says it is an ES module and runs as one: a .mjs file on plain Node', () => {
    expect(library.language).toBe('js');
    const before = readFileSync(join(ROOT, 'README.md'), 'utf8').split(library.code)[0]!;
    const intro = before.slice(before.lastIndexOf('## The library'));
    expect(intro).toMatch(/ES modules/);
    expect(intro).toContain('hello.mjs');
  });

  it('without ANTHROPIC_API_KEY it refuses to start: one line naming the variable, exit 1, nothing in Redis', async () => {
    const env = exampleEnv(mock.url);
    delete env['ANTHROPIC_API_KEY'];
    const r = await run(library, env);
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/set ANTHROPIC_API_KEY/);
    expect(await keysUnder(env['LLMQ_PREFIX']!)).toBe(0);
  });

  it(
    'run twice on one queue, each run gets an answer of its own: a new job and a new call',
    async () => {
      const own = await startMockAnthropic({});
      try {
        const env = exampleEnv(own.url);
        const first = await run(library, env);
        expect(first.code, first.out).toBe(0);
        const second = await run(library, env);
        expect(second.code, second.out).toBe(0);
        // A fixed idempotency key would hand the second run the first run's job, with no call.
        expect(own.stats().attempts).toBe(2);
        expect(first.out.trim()).not.toBe('');
        expect(second.out.trim()).not.toBe('');
      } finally {
        await own.close();
      }
    },
    2 * EXIT_WITHIN_MS,
  );
});
