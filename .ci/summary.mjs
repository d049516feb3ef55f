// The closing line CI reads: "N passed, N failed[, N skipped]", from vitest's JSON report, the
// run's output and its exit status, so that no broken run reads green:
//   node .ci/summary.mjs --report FILE --log FILE --exit N   after the tests
//   node .ci/summary.mjs --failed-step NAME --exit N         when a step before them failed
// Counted as failures, each named on a line above the closing one: failed tests; suites that
// failed on their own (an import, a beforeAll or afterAll that threw: their tests read
// "skipped"); unhandled errors and crashed test workers (vitest prints them, the JSON report
// does not have them and says success); processes the tests left running (test/global-setup.ts
// names them); a missing report; a non-zero exit with none of these.
// Exits 1 when anything failed.
import { existsSync, readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

/** Suites that failed beyond their failed tests: the file and describes above a failed test fail too. */
function ownSuiteFailures(r) {
  const withFailedTest = new Set();
  for (const f of r.testResults ?? []) {
    for (const a of f.assertionResults ?? []) {
      if (a.status !== 'failed') continue;
      const titles = a.ancestorTitles ?? [];
      for (let i = 0; i <= titles.length; i++)
        withFailedTest.add([f.name, ...titles.slice(0, i)].join(' > '));
    }
  }
  return Math.max(0, (r.numFailedTestSuites ?? 0) - withFailedTest.size);
}

/** What vitest printed about errors outside tests. */
function fromLog(text) {
  const plain = text.replace(/\x1b\[[0-9;]*m/g, '');
  const caught = Number(/Vitest caught (\d+) unhandled errors?/.exec(plain)?.[1] ?? 0);
  // Each crash is also one of the unhandled errors vitest counts.
  const crashed = (plain.match(/Worker exited unexpectedly/g) ?? []).length;
  // test/global-setup.ts: processes the tests started and left running, named in its error.
  const leftover = Number(/(\d+) process\(es\) the tests started were still running/.exec(plain)?.[1] ?? 0);
  return { caught, crashed, leftover };
}

function summarize(args) {
  const exit = Number(args.exit ?? 0);
  const lines = [];
  if (args['failed-step']) {
    lines.push(`ci: ${args['failed-step']} failed (exit ${exit}): no test ran`);
    return { lines, passed: 0, failed: 1, skipped: 0 };
  }
  if (!args.report || !existsSync(args.report)) {
    lines.push(`ci: no test report (exit ${exit}): the checks failed, or vitest did not start`);
    return { lines, passed: 0, failed: 1, skipped: 0 };
  }
  const r = JSON.parse(readFileSync(args.report, 'utf8'));
  let failed = r.numFailedTests ?? 0;
  for (const f of r.testResults ?? []) {
    const own = (f.assertionResults ?? []).some((a) => a.status === 'failed');
    if (f.status === 'failed' && !own)
      lines.push(`failed file: ${f.name}: ${String(f.message ?? '').split('\n')[0] || 'no test ran'}`);
  }
  const suites = ownSuiteFailures(r);
  if (suites > 0) lines.push(`failed suites: ${suites} (an import or a hook threw; their tests read as skipped)`);
  failed += suites;
  const log = args.log && existsSync(args.log) ? fromLog(readFileSync(args.log, 'utf8')) : undefined;
  if (log && log.crashed > 0)
    lines.push(`crashed test workers: ${log.crashed} (a test file's process died; its tests did not finish)`);
  const errors = log ? Math.max(log.caught, log.crashed) : 0;
  if (errors > 0) lines.push(`unhandled errors: ${errors} (see "Unhandled Errors" in the output)`);
  failed += errors;
  if (log && log.leftover > 0) {
    lines.push(`leftover processes: ${log.leftover} (started by the tests, still running after them; named in the output)`);
    failed += 1;
  }
  if (exit !== 0 && failed === 0) {
    lines.push(`vitest exited ${exit} though nothing above failed: counted as one failure`);
    failed = 1;
  }
  return {
    lines,
    passed: r.numPassedTests ?? 0,
    failed,
    skipped: (r.numPendingTests ?? 0) + (r.numTodoTests ?? 0),
  };
}

let s;
try {
  const { values } = parseArgs({
    options: {
      report: { type: 'string' },
      log: { type: 'string' },
      exit: { type: 'string' },
      'failed-step': { type: 'string' },
    },
  });
  s = summarize(values);
} catch (err) {
  s = { lines: [`ci: the summary failed: ${err.message}`], passed: 0, failed: 1, skipped: 0 };
}
for (const l of s.lines) console.log(l);
console.log(`${s.passed} passed, ${s.failed} failed${s.skipped ? `, ${s.skipped} skipped` : ''}`);
process.exitCode = s.failed > 0 ? 1 : 0;
