/**
 * The examples a user copies: every ```ts block of README.md and docs/*.md that imports from
 * 'llmq' is a program. Each is type-checked as a user's ES module project would (the project's
 * strict options, `llmq` resolved to this checkout's sources) and run against the mock provider
 * and the test Redis, with its own prefix and queue; one that does not type-check, fails, or
 * does not exit on its own (an open connection) fails here.
 */
import { spawn, spawnSync } from 'node:child_process';
import {
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MockAnthropicHandle, startMockAnthropic } from '../testing/index.ts';
import { deleteKeys, newRedis, REDIS_URL, testNames } from './helpers.ts';

const ROOT = new URL('../', import.meta.url).pathname;
/** How long an example may run before it counts as hanging. */
const EXIT_WITHIN_MS = 60_000;

interface Example {
  /** `README.md:461`: the file and line of the block's opening fence. */
  readonly where: string;
  readonly code: string;
}

/** The program blocks of one markdown file: ```ts fences whose code imports from 'llmq'. */
function programsIn(file: string): Example[] {
  const lines = readFileSync(join(ROOT, file), 'utf8').split('\n');
  const found: Example[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (!/^```(ts|typescript)\s*$/.test(lines[i]!)) continue;
    const end = lines.findIndex((l, j) => j > i && /^```\s*$/.test(l));
    const code = lines.slice(i + 1, end).join('\n');
    if (/from\s+['"]llmq(\/testing)?['"]/.test(code))
      found.push({ where: `${file}:${i + 1}`, code });
    i = end;
  }
  return found;
}

const docs = readdirSync(join(ROOT, 'docs'))
  .filter((f) => f.endsWith('.md'))
  .map((f) => `docs/${f}`);
const examples = ['README.md', ...docs].flatMap(programsIn);
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
  return new Promise<{ code: number | null; out: string; hung: boolean }>((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', fileOf(e)], {
      cwd: dir,
      env: { ...env, TSX_TSCONFIG_PATH: join(dir, 'tsconfig.json') },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    let hung = false;
    const timer = setTimeout(() => {
      hung = true;
      child.kill('SIGKILL');
    }, EXIT_WITHIN_MS);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out, hung });
    });
  });
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
        const names = testNames('example');
        prefixes.push(names.prefix);
        const env: NodeJS.ProcessEnv = {
          ...process.env,
          REDIS_URL,
          LLMQ_PREFIX: names.prefix,
          LLMQ_QUEUE: names.queue,
          ANTHROPIC_API_KEY: 'sk-test',
          ANTHROPIC_BASE_URL: mock.url,
        };
        const r = await run(e, env);
        expect(r.hung, `${e.where} did not exit within ${EXIT_WITHIN_MS} ms:\n${r.out}`).toBe(
          false,
        );
        expect(r.code, r.out).toBe(0);
      },
      EXIT_WITHIN_MS + 10_000,
    );
  }
});
