import { execFileSync, spawnSync } from 'node:child_process';
import {
  appendFileSync,
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
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = new URL('../', import.meta.url).pathname;
const VERSION = (
  JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }
).version;

/** `llmq` in the copy, with LLMQ_FROM_SOURCE cleared so the bin chooses for itself. */
function llmq(dir: string, args: string[]) {
  const env = { ...process.env };
  delete env['LLMQ_FROM_SOURCE'];
  const r = spawnSync(process.execPath, ['scripts/llmq.mjs', ...args], {
    cwd: dir,
    env,
    encoding: 'utf8',
  });
  return { code: r.status, out: `${r.stdout}${r.stderr}`.trim() };
}

// The build is run in a copy of the project, so the working tree's dist/ is left as it is.
describe('npm run build', () => {
  let dir: string;

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'llmq-build-'));
    const files = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard'], {
      cwd: ROOT,
      encoding: 'utf8',
    })
      .split('\n')
      .filter((f) => f && !f.startsWith('test/') && existsSync(join(ROOT, f)));
    for (const f of files) {
      mkdirSync(dirname(join(dir, f)), { recursive: true });
      cpSync(join(ROOT, f), join(dir, f));
    }
    symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
    execFileSync(process.execPath, ['scripts/build.mjs'], { cwd: dir, stdio: 'pipe' });
  }, 120_000);

  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('compiles every module to dist/ with the Lua scripts and samples the code reads', async () => {
    for (const f of [
      'dist/index.js',
      'dist/scripts/cli.js',
      'dist/worker/worker.js',
      'dist/shared/limiter/lua/acquire-10.lua',
      'dist/worker/lua/peek-6.lua',
      'dist/producer/lua/reserveDepth-6.lua',
      'dist/shared/lua/count-1.lua',
    ])
      expect(existsSync(join(dir, f)), f).toBe(true);
    expect(readFileSync(join(dir, 'dist/worker/worker.js'), 'utf8')).toContain(
      "from '../shared/limiter/limiter.js'",
    );
    // The compiled library loads its Lua and version from dist/ alone.
    const lib = (await import(join(dir, 'dist/index.js'))) as Record<string, unknown>;
    expect(typeof lib['startWorker']).toBe('function');
    expect(typeof lib['Limiter']).toBe('function');
  });

  it('llmq runs dist/ while it matches the sources, and the TypeScript once a source changes', () => {
    expect(llmq(dir, ['--version'])).toEqual({ code: 0, out: VERSION });
    // Proof of which one runs: a dist/ that says so.
    writeFileSync(
      join(dir, 'dist/scripts/cli.js'),
      "export async function main() { console.log('compiled'); return 0; }\n",
    );
    expect(llmq(dir, ['--version'])).toEqual({ code: 0, out: 'compiled' });
    // An edit after the build: the old build is no longer used.
    appendFileSync(join(dir, 'shared/keys.ts'), '\n// edited after the build\n');
    expect(llmq(dir, ['--version'])).toEqual({ code: 0, out: VERSION });
  });
});
