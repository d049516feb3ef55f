/** The bench: scenarios run against the mock server (`llmq bench`, scripts/cli/bench.ts). */
export { idealSchedule, uniformMinimumMs, utilization } from './budget.ts';
export { killAllChildren } from './processes.ts';
export { cleanupOpenScopes } from './redis-scope.ts';
export type { ScenarioResult, Target } from './report.ts';
export {
  type BenchOptions,
  type BenchReport,
  resolveScenarios,
  runBench,
  SCENARIOS,
} from './run-bench.ts';
