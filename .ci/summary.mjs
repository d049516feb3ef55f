// Prints vitest's JSON report as the closing line CI reads: "N passed, N failed[, N skipped]".
// A file that failed with no failed test of its own (its import or a beforeAll threw, so its tests
// read "skipped") counts as one failure, and is named on a line above.
import { readFileSync } from 'node:fs';

const r = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const files = r.testResults ?? [];
const broken = files.filter(
  (f) => f.status === 'failed' && !(f.assertionResults ?? []).some((a) => a.status === 'failed'),
);
for (const f of broken) {
  const why = String(f.message ?? '').split('\n')[0] || 'no test ran';
  console.log(`failed file: ${f.name}: ${why}`);
}
const failed = (r.numFailedTests ?? 0) + broken.length;
const skipped = (r.numPendingTests ?? 0) + (r.numTodoTests ?? 0);
console.log(`${r.numPassedTests ?? 0} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
