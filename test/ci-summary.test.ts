import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '..');
const dir = mkdtempSync(join(tmpdir(), 'llmq-ci-summary-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Run {
  /** The JSON report, the output and the exit status of the run. */
  readonly report: string;
  readonly log: string;
  readonly exit: number;
}

/** Runs vitest on `files` in a folder of their own, as .ci/run does: report, output, status. */
function vitestRun(files: Record<string, string>, config = "{ pool: 'forks' }"): Run {
  const root = mkdtempSync(join(dir, 'run-'));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(root, name), text);
  writeFileSync(join(root, 'vitest.config.mjs'), `export default { test: ${config} };\n`);
  const report = join(root, 'report.json');
  const run = spawnSync(
    process.execPath,
    [
      join(ROOT, 'node_modules/vitest/vitest.mjs'),
      'run',
      '--root',
      root,
      '--reporter=default',
      '--reporter=json',
      `--outputFile=${report}`,
    ],
    { encoding: 'utf8', cwd: root },
  );
  const log = join(root, 'output.log');
  writeFileSync(log, run.stdout + run.stderr);
  return { report, log, exit: run.status ?? 1 };
}

/** .ci/summary.mjs's lines and exit status. */
function summary(args: string[]): { lines: string[]; exit: number } {
  const r = spawnSync(process.execPath, [join(ROOT, '.ci/summary.mjs'), ...args], {
    encoding: 'utf8',
  });
  return { lines: r.stdout.trim().split('\n'), exit: r.status ?? 1 };
}

const summaryOf = (run: Run) =>
  summary(['--report', run.report, '--log', run.log, '--exit', String(run.exit)]);

const reportSays = (run: Run) =>
  JSON.parse(readFileSync(run.report, 'utf8')) as { success: boolean };

const OK = "import { it } from 'vitest';\nit('passes', () => {});\n";

/** Whether a process runs (a zombie, dead but not yet reaped, does not). */
function isRunning(pid: number): boolean {
  try {
    return !/^\S+ \(.*\) Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

describe('the CI closing line', () => {
  it('counts a file whose beforeAll or import failed as a failure, not as skipped tests', () => {
    const run = vitestRun({
      'ok.test.ts': OK,
      'hook.test.ts':
        "import { beforeAll, it } from 'vitest';\n" +
        "beforeAll(() => { throw new Error('no Redis'); });\n" +
        "it('one', () => {});\nit('two', () => {});\n",
      'import.test.ts':
        "import './missing-module.ts';\nimport { it } from 'vitest';\nit('x', () => {});\n",
    });
    const out = summaryOf(run);
    expect(out.lines.at(-1)).toBe('1 passed, 2 failed, 2 skipped');
    expect(out.lines.filter((l) => l.startsWith('failed file:'))).toHaveLength(2);
    expect(out.lines.join('\n')).toMatch(/hook\.test\.ts: .*no Redis/);
    expect(out.exit).toBe(1);
  });

  it('counts a failed test once, not again for its file', () => {
    const run = vitestRun({
      'mixed.test.ts':
        "import { expect, it } from 'vitest';\n" +
        "it('passes', () => {});\nit('fails', () => { expect(1).toBe(2); });\n",
    });
    expect(summaryOf(run).lines).toEqual(['1 passed, 1 failed']);
  });

  it('counts a describe whose beforeAll threw beside a failed test of the same file', () => {
    const run = vitestRun({
      'suite.test.ts':
        "import { beforeAll, describe, expect, it } from 'vitest';\n" +
        "it('fails', () => { expect(1).toBe(2); });\n" +
        "describe('group', () => {\n  beforeAll(() => { throw new Error('setup'); });\n" +
        "  it('a', () => {});\n});\n",
    });
    const out = summaryOf(run);
    expect(out.lines.at(-1)).toBe('0 passed, 2 failed, 1 skipped');
    expect(out.lines).toContain(
      'failed suites: 1 (an import or a hook threw; their tests read as skipped)',
    );
  });

  it('counts an unhandled error as a failure, though the JSON report says success', () => {
    const run = vitestRun({
      'ok.test.ts': OK,
      'late.test.ts':
        "import { it } from 'vitest';\n" +
        "it('passes, then rejects', async () => {\n" +
        "  setTimeout(() => { Promise.reject(new Error('late')); }, 5);\n" +
        '  await new Promise((r) => setTimeout(r, 50));\n});\n',
    });
    expect(reportSays(run).success).toBe(true);
    const out = summaryOf(run);
    expect(out.lines.at(-1)).toBe('2 passed, 1 failed');
    expect(out.lines).toContain('unhandled errors: 1 (see "Unhandled Errors" in the output)');
    expect(out.exit).toBe(1);
  });

  it('counts a crashed test worker as a failure', () => {
    const run = vitestRun({
      'ok.test.ts': OK,
      'crash.test.ts':
        "import { it } from 'vitest';\n" +
        "it('dies', async () => {\n  process.kill(process.pid, 'SIGKILL');\n" +
        '  await new Promise((r) => setTimeout(r, 1_000));\n});\n',
    });
    expect(reportSays(run).success).toBe(true);
    const out = summaryOf(run);
    expect(out.lines.at(-1)).toBe('1 passed, 1 failed');
    expect(out.lines).toContain(
      "crashed test workers: 1 (a test file's process died; its tests did not finish)",
    );
  });

  it('fails the run when a test leaves a process running: it is named, and killed', () => {
    const globalSetup = JSON.stringify(join(ROOT, 'test/global-setup.ts'));
    const run = vitestRun(
      {
        'ok.test.ts': OK,
        'leak.test.ts':
          "import { spawn } from 'node:child_process';\nimport { it } from 'vitest';\n" +
          "it('starts a sleeper and forgets it', () => {\n" +
          "  spawn('sleep', ['300'], { stdio: 'ignore', detached: true }).unref();\n});\n",
      },
      `{ pool: 'forks', globalSetup: [${globalSetup}] }`,
    );
    expect(reportSays(run).success).toBe(true);
    expect(run.exit).toBe(1);
    const output = readFileSync(run.log, 'utf8');
    const pid = Number(/pid (\d+): sleep 300/.exec(output)?.[1]);
    expect(pid).toBeGreaterThan(0);
    expect(isRunning(pid)).toBe(false);
    const out = summaryOf(run);
    expect(out.lines.at(-1)).toBe('2 passed, 1 failed');
    expect(out.lines).toContain(
      'leftover processes: 1 (started by the tests, still running after them; named in the output)',
    );
  });

  it('counts a failing exit with a clean report, and a missing report, as one failure each', () => {
    const run = vitestRun({ 'ok.test.ts': OK });
    const clean = summary(['--report', run.report, '--exit', '1']);
    expect(clean.lines.at(-1)).toBe('1 passed, 1 failed');
    expect(clean.exit).toBe(1);
    expect(summary(['--report', run.report, '--log', run.log, '--exit', '0'])).toEqual({
      lines: ['1 passed, 0 failed'],
      exit: 0,
    });
    const missing = summary(['--report', join(dir, 'none.json'), '--exit', '2']);
    expect(missing.lines.at(-1)).toBe('0 passed, 1 failed');
  });

  it('.ci/run ends with the closing line when npm ci fails', () => {
    const bin = mkdtempSync(join(dir, 'bin-'));
    writeFileSync(
      join(bin, 'npm'),
      '#!/bin/sh\n[ "$1" = ci ] && { echo "npm error: no lockfile" >&2; exit 3; }\nexit 0\n',
    );
    chmodSync(join(bin, 'npm'), 0o755);
    const r = spawnSync(join(ROOT, '.ci/run'), {
      encoding: 'utf8',
      env: { ...process.env, PATH: `${bin}${delimiter}${process.env['PATH']}` },
    });
    expect(r.status).toBe(3);
    const lines = r.stdout.trim().split('\n');
    expect(lines.at(-2)).toBe('ci: npm ci failed (exit 3): no test ran');
    expect(lines.at(-1)).toBe('0 passed, 1 failed');
  });
});
