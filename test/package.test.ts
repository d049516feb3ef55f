/**
 * The package as a user gets it: `npm pack` (which builds) in a copy of the project, the tarball
 * installed into an empty folder, then used from there with plain Node, tsc and npx. On every
 * Node line users run (test/fixtures/node-lines.ts), npm installs it with no warning, the
 * README's examples run as written, and `llmq worker` from the bin completes a job.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Producer } from '../producer/producer.ts';
import { type MockAnthropicHandle, startMockAnthropic } from '../testing/index.ts';
import { programsIn } from './fixtures/doc-examples.ts';
import { envWithNode, NODE_LINES, nodeBinary, npmCli, THIS_LINE } from './fixtures/node-lines.ts';
import { deleteKeys, newRedis, REDIS_URL, testNames, until } from './helpers.ts';

const ROOT = new URL('../', import.meta.url).pathname;
const TSC = join(ROOT, 'node_modules/.bin/tsc');

function run(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = process.env) {
  const r = spawnSync(cmd, args, { cwd, encoding: 'utf8', env: { ...env, REDIS_URL } });
  return { code: r.status, out: `${r.stdout}${r.stderr}`.trim() };
}

let tmp: string;
let copy: string;
let app: string;
/** What npm printed installing the tarball on this process's Node line. */
let thisLineOutput: string;
let tarball: string;
let shipped: string[];
let redis: Redis;
const names = testNames('pkg');

beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), 'llmq-pkg-'));
  // A copy of the project's files, so packing (and its build) leaves this tree's dist/ alone.
  copy = join(tmp, 'project');
  const files = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard'], {
    cwd: ROOT,
    encoding: 'utf8',
  })
    .split('\n')
    .filter((f) => f && existsSync(join(ROOT, f)));
  for (const f of files) {
    mkdirSync(dirname(join(copy, f)), { recursive: true });
    cpSync(join(ROOT, f), join(copy, f));
  }
  symlinkSync(join(ROOT, 'node_modules'), join(copy, 'node_modules'));
  const out = execFileSync('npm', ['pack', '--json', '--pack-destination', tmp], {
    cwd: copy,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  // The build's own lines come first on stdout, then npm's JSON.
  const packed = JSON.parse(out.slice(out.search(/^\[/m))) as {
    filename: string;
    files: { path: string }[];
  }[];
  tarball = join(tmp, packed[0]!.filename);
  shipped = packed[0]!.files.map((f) => f.path);

  const installed = installApp();
  app = installed.app;
  thisLineOutput = installed.npmOutput;
  redis = newRedis();
}, 300_000);

/**
 * A new project for the tarball, approving the two install scripts npm 11.16+ lists, as the
 * README says: msgpackr-extract's, and llmq's own `prepare`, which npm lists only for a package
 * installed from a file (a registry install runs no prepare).
 */
function newProject(dir: string): void {
  mkdirSync(dir);
  const allowScripts = { 'msgpackr-extract': true, [`file:${tarball}`]: true };
  writeFileSync(
    join(dir, 'package.json'),
    `${JSON.stringify({ name: 'app', private: true, allowScripts }, null, 2)}\n`,
  );
}

/** npm, run by that line's node, installing the tarball into `dir`: its output. */
function npmInstall(line: number, dir: string, extra: string[] = []): string {
  const node = nodeBinary(line);
  const r = spawnSync(
    node,
    [npmCli(), 'install', tarball, '--prefer-offline', '--no-audit', '--no-fund', ...extra],
    { cwd: dir, encoding: 'utf8', env: envWithNode(node, process.env) },
  );
  const out = `${r.stdout}${r.stderr}`;
  if (r.status !== 0) throw new Error(`npm install on Node ${line} failed:\n${out}`);
  return out;
}

/** The project installed for real (once, by this process's Node): every line runs from it. */
function installApp(): { app: string; npmOutput: string } {
  const dir = join(tmp, 'app');
  newProject(dir);
  return { app: dir, npmOutput: npmInstall(THIS_LINE, dir) };
}

afterAll(async () => {
  if (redis) {
    await deleteKeys(redis, names.prefix);
    redis.disconnect();
  }
  if (tmp) rmSync(tmp, { recursive: true, force: true });
}, 180_000);

describe('the npm package', () => {
  it('ships compiled JavaScript with declarations, the Lua and the bin, and no sources or tests', () => {
    for (const f of [
      'package.json',
      'README.md',
      'scripts/llmq.mjs',
      'dist/index.js',
      'dist/index.d.ts',
      'dist/testing/index.js',
      'dist/testing/index.d.ts',
      'dist/scripts/cli/main.js',
      'dist/shared/limiter/lua/acquire-13.lua',
      'dist/shared/limiter/lua/includes/view.lua',
      'dist/worker/lua/peek-8.lua',
      'dist/producer/lua/reserveDepth-9.lua',
      'dist/shared/lua/count-1.lua',
    ])
      expect(shipped, f).toContain(f);
    const stray = shipped.filter(
      (f) =>
        f.startsWith('test/') ||
        f.includes('/results/') ||
        f.endsWith('.map') ||
        (f.endsWith('.ts') && !f.endsWith('.d.ts')),
    );
    expect(stray).toEqual([]);
    const pkg = JSON.parse(readFileSync(join(app, 'node_modules/llmq/package.json'), 'utf8'));
    expect(Object.keys(pkg.dependencies)).not.toContain('tsx');
    expect(Object.keys(pkg.dependencies)).not.toContain('typescript');
  });

  it('runs one job through the mock from a plain .mjs file on Node', () => {
    const script = `
      import { connectRedis, createProducer, createProviderClient, resolveConfig, startWorker } from 'llmq';
      import { startMockAnthropic } from 'llmq/testing';
      import * as llmq from 'llmq';

      const [prefix, queue] = process.argv.slice(2);
      const mock = await startMockAnthropic({ outputShare: 0.5 });
      const config = resolveConfig({
        env: { REDIS_URL: process.env.REDIS_URL, LLMQ_PREFIX: prefix, LLMQ_QUEUE: queue, LLMQ_TPM: '100000' },
      });
      const names = { prefix: config.prefix, queue: config.queue };
      const redis = connectRedis(config.redisUrl);
      const worker = await startWorker({
        redis,
        names,
        client: createProviderClient({ apiKey: 'sk-test', baseURL: mock.url }),
        limiter: { limits: { tokens: 100000 }, windowMs: 60000 },
      });
      const producer = createProducer(config);
      const id = await producer.enqueue({
        model: 'claude-test-1', max_tokens: 40, messages: [{ role: 'user', content: 'Say hello.' }],
      });
      const result = await producer.waitForResult(id, { timeout: 30000 });
      await worker.stop(5000);
      await producer.close();
      await redis.quit();
      await mock.close();
      const leaks = Object.keys(llmq).filter((k) => /demo|mock|bench|command/i.test(k));
      console.log(JSON.stringify({ message: result.message, calls: mock.stats().attempts, leaks }));
    `;
    writeFileSync(join(app, 'one-job.mjs'), script);
    const r = run(process.execPath, ['one-job.mjs', names.prefix, names.queue], app);
    expect(r.code, r.out).toBe(0);
    const out = JSON.parse(r.out.split('\n').at(-1)!);
    expect(out.message.stop_reason).toBe('end_turn');
    expect(out.message.usage.output_tokens).toBe(20);
    expect(out.message.content[0].text).toEqual(expect.any(String));
    expect(out.calls).toBe(1);
    expect(out.leaks).toEqual([]);
  });

  it('a CommonJS program can require() both entries (Node loads the ES modules)', () => {
    const script = `
      const { resolveConfig, LlmqError } = require('llmq');
      const { startMockAnthropic } = require('llmq/testing');
      (async () => {
        const mock = await startMockAnthropic({});
        const config = resolveConfig({ env: { LLMQ_QUEUE: 'from-cjs' } });
        await mock.close();
        console.log(JSON.stringify({ queue: config.queue, errors: typeof LlmqError, mock: mock.url.startsWith('http://') }));
      })();
    `;
    writeFileSync(join(app, 'require.cjs'), script);
    const r = spawnSync(process.execPath, ['require.cjs'], { cwd: app, encoding: 'utf8' });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ queue: 'from-cjs', errors: 'function', mock: true });
  });

  it('type-checks a .ts file that uses the API, and rejects a wrong call', () => {
    writeFileSync(
      join(app, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          module: 'nodenext',
          moduleResolution: 'nodenext',
          target: 'es2022',
          strict: true,
          noEmit: true,
          types: ['node'],
          typeRoots: [join(ROOT, 'node_modules/@types')],
        },
        files: ['use.ts'],
      }),
    );
    const use = `
      import { type Config, createProducer, type JobResult, LlmqError, resolveConfig } from 'llmq';
      import { type MockAnthropicHandle, startMockAnthropic } from 'llmq/testing';

      export async function summarize(text: string): Promise<string> {
        const mock: MockAnthropicHandle = await startMockAnthropic({});
        const config: Config = resolveConfig({ env: { ANTHROPIC_BASE_URL: mock.url } });
        const producer = createProducer(config);
        const id: string = await producer.enqueue({
          model: 'claude-test-1', max_tokens: 100, messages: [{ role: 'user', content: text }],
        });
        const result: JobResult = await producer.waitForResult(id, { timeout: 10_000 });
        if (!(result.attempts > 0)) throw new LlmqError('CONFIG_INVALID', 'never ran');
        await producer.close();
        await mock.close();
        return result.message.id;
      }
    `;
    writeFileSync(join(app, 'use.ts'), `${use}\nexport const _ = 1;\n`);
    const ok = run(process.execPath, [TSC, '-p', 'tsconfig.json'], app);
    expect(ok.out).toBe('');
    expect(ok.code).toBe(0);
    // A wrong call (a number where the config goes) must fail the same check.
    writeFileSync(join(app, 'use.ts'), `${use}\nexport const bad = createProducer(42);\n`);
    const bad = run(process.execPath, [TSC, '-p', 'tsconfig.json'], app);
    expect(bad.code).not.toBe(0);
    expect(bad.out).toMatch(/use\.ts.*error TS2345/);
  }, 240_000);

  it('npx llmq --help lists the commands', () => {
    // `--no`: never download; the local install must provide the bin.
    const r = run('npx', ['--no', '--', 'llmq', '--help'], app);
    expect(r.code, r.out).toBe(0);
    for (const command of ['worker', 'enqueue', 'status', 'dlq', 'dashboard', 'serve', 'batch'])
      expect(r.out).toMatch(new RegExp(`^ {2}${command}\\b`, 'm'));
  });

  it('package.json is as npm publishes it: npm pkg fix changes nothing (it once dropped the bin)', () => {
    const before = readFileSync(join(copy, 'package.json'), 'utf8');
    const fix = run('npm', ['pkg', 'fix'], copy);
    expect(fix.code, fix.out).toBe(0);
    expect(JSON.parse(readFileSync(join(copy, 'package.json'), 'utf8'))).toEqual(
      JSON.parse(before),
    );
    const pkg = JSON.parse(before);
    expect(pkg.private).toBeUndefined();
    expect(pkg.bin).toEqual({ llmq: 'scripts/llmq.mjs' });
    expect(pkg.publishConfig).toMatchObject({ access: 'public' });
  });

  it('the bin runs compiled code only: without dist/ it says to build and exits 1', () => {
    const built = run(process.execPath, ['scripts/llmq.mjs', '--version'], copy);
    expect(built.code).toBe(0);
    rmSync(join(copy, 'dist'), { recursive: true, force: true });
    const r = run(process.execPath, ['scripts/llmq.mjs', '--version'], copy);
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/^llmq: \S+dist\/scripts\/cli\/main\.js is missing: run npm run build/);
    expect(r.out.split('\n')).toHaveLength(1);
  });
});

/** A child process's exit, and its output so far. */
function started(node: string, args: string[], cwd: string, env: NodeJS.ProcessEnv) {
  const child = spawn(node, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const exit = new Promise<number | string>((resolve) =>
    child.once('exit', (code, signal) => resolve(code ?? signal ?? -1)),
  );
  return { child, exit, out: () => out };
}

/**
 * Each line: npm running on that line's node resolves the whole tree of a fresh project (a dry
 * run judges every package's engines, as the install does, without unpacking 300 packages
 * again); the README's examples and the worker then run on that node from the installed tree
 * (the same tree on every line: pure JavaScript, msgpackr-extract's N-API prebuilds).
 */
describe.each(NODE_LINES)('the package on Node %i', (line) => {
  let node: string;
  let npmOutput: string;
  let mock: MockAnthropicHandle;
  const prefixes: string[] = [];

  beforeAll(async () => {
    node = nodeBinary(line);
    if (line === THIS_LINE) npmOutput = thisLineOutput;
    else {
      const dir = join(tmp, `dry-run-node${line}`);
      newProject(dir);
      npmOutput = npmInstall(line, dir, ['--dry-run']);
    }
    mock = await startMockAnthropic({});
  }, 300_000);

  afterAll(async () => {
    await mock?.close();
    for (const p of prefixes) await deleteKeys(redis, p);
  });

  /** The env of a run on a queue of its own, calling the mock, with this line's node first. */
  function lineEnv(): NodeJS.ProcessEnv {
    const names = testNames(`pkg${line}`);
    prefixes.push(names.prefix);
    return envWithNode(node, {
      ...process.env,
      REDIS_URL,
      LLMQ_PREFIX: names.prefix,
      LLMQ_QUEUE: names.queue,
      ANTHROPIC_API_KEY: 'sk-test',
      ANTHROPIC_BASE_URL: mock.url,
    });
  }

  it('npm installs the packed tarball with no warning (no EBADENGINE)', () => {
    expect(run(node, ['--version'], app).out).toMatch(new RegExp(`^v${line}\\.`));
    expect(npmOutput).toMatch(/added \d+ packages|add llmq/);
    const warnings = npmOutput.split('\n').filter((l) => /^npm (warn|error)|EBADENGINE/i.test(l));
    expect(warnings).toEqual([]);
  });

  it("runs the README's JavaScript examples as written, as .mjs files", async () => {
    const programs = programsIn('README.md').filter((e) => e.language === 'js');
    expect(programs.length).toBeGreaterThanOrEqual(2);
    for (const [i, e] of programs.entries()) {
      const file = `readme-${i}.mjs`;
      writeFileSync(join(app, file), `${e.code}\n`);
      const p = started(node, [file], app, lineEnv());
      const code = await p.exit;
      expect(code, `${e.where} on Node ${line}:\n${p.out()}`).toBe(0);
    }
  }, 120_000);

  it('llmq worker from the bin completes a job, answers its probes, and exits 0 on SIGTERM', async () => {
    const env = lineEnv();
    const bin = join(app, 'node_modules/.bin/llmq');
    const args = [bin, 'worker', '--concurrency', '2', '--health-port', '0'];
    const worker = started(node, args, app, env);
    try {
      await Promise.race([
        until(() => /health probes at /.test(worker.out()), 60_000, 50),
        worker.exit.then((code) => {
          throw new Error(`llmq worker exited (${code}) on Node ${line}: ${worker.out()}`);
        }),
      ]);
      const names = { prefix: env['LLMQ_PREFIX']!, queue: env['LLMQ_QUEUE']! };
      const producer = new Producer({ redis, names });
      try {
        const id = await producer.enqueue({
          model: 'claude-test-1',
          max_tokens: 20,
          messages: [{ role: 'user', content: `Hello from Node ${line}.` }],
        });
        const result = await producer.waitForResult(id, { timeout: 30_000 });
        expect(result.message.stop_reason).toBe('end_turn');
      } finally {
        await producer.close();
      }
      const probes = /health probes at (\S+) /.exec(worker.out())![1]!;
      for (const path of ['/healthz', '/readyz'])
        expect((await fetch(`${probes}${path}`)).status, `${path} on Node ${line}`).toBe(200);
      expect(await (await fetch(`${probes}/metrics`)).text()).toMatch(
        /^llmq_worker_calls_started_total\{.*\} 1$/m,
      );
      worker.child.kill('SIGTERM');
      expect(await worker.exit, worker.out()).toBe(0);
    } finally {
      worker.child.kill('SIGKILL');
    }
  }, 120_000);
});
