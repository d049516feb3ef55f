import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '..');
const dir = mkdtempSync(join(tmpdir(), 'llmq-ci-summary-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs vitest on `files` in a folder of their own; returns the path of its JSON report. */
function vitestReport(files: Record<string, string>): string {
  const root = mkdtempSync(join(dir, 'run-'));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(root, name), text);
  writeFileSync(join(root, 'vitest.config.mjs'), 'export default { test: {} };\n');
  const report = join(root, 'report.json');
  const run = spawnSync(
    process.execPath,
    [
      join(ROOT, 'node_modules/vitest/vitest.mjs'),
      'run',
      '--root',
      root,
      '--reporter=json',
      `--outputFile=${report}`,
    ],
    { encoding: 'utf8', cwd: root },
  );
  expect(run.status, run.stderr).toBe(1);
  return report;
}

const summary = (report: string) =>
  execFileSync(process.execPath, [join(ROOT, '.ci/summary.mjs'), report], { encoding: 'utf8' });

describe('the CI closing line', () => {
  it('counts a file whose beforeAll or import failed as a failure, not as skipped tests', () => {
    const report = vitestReport({
      'ok.test.ts': "import { it } from 'vitest';\nit('passes', () => {});\n",
      'hook.test.ts':
        "import { beforeAll, it } from 'vitest';\n" +
        "beforeAll(() => { throw new Error('no Redis'); });\n" +
        "it('one', () => {});\nit('two', () => {});\n",
      'import.test.ts':
        "import './missing-module.ts';\nimport { it } from 'vitest';\nit('x', () => {});\n",
    });
    const out = summary(report).trim().split('\n');
    expect(out.at(-1)).toBe('1 passed, 2 failed, 2 skipped');
    expect(out.filter((l) => l.startsWith('failed file:'))).toHaveLength(2);
    expect(out.join('\n')).toMatch(/hook\.test\.ts: .*no Redis/);
  });

  it('counts a failed test once, not again for its file', () => {
    const report = vitestReport({
      'mixed.test.ts':
        "import { expect, it } from 'vitest';\n" +
        "it('passes', () => {});\nit('fails', () => { expect(1).toBe(2); });\n",
    });
    expect(summary(report).trim()).toBe('1 passed, 1 failed');
  });
});
