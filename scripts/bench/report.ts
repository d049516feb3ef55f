import type { InputCounting } from '../../testing/mock-anthropic/index.ts';
import { renderTable } from './table.ts';

/** What every scenario gets. */
export interface ScenarioContext {
  /** Windows scaled down (10 s → 2 s) and smaller workloads, so every scenario is quick. */
  readonly quick: boolean;
  /**
   * A tiny workload (a window of 1 s, a couple of waves) that exercises every client in seconds:
   * for the smoke test, never for figures. Implies `quick`.
   */
  readonly smoke?: boolean;
  readonly redisUrl: string;
  /** How the mock counts input tokens (`--counter differing`); its tokenizer when absent. */
  readonly counting?: InputCounting | undefined;
  /** Progress, one line at a time (stderr under the CLI). */
  readonly log: (line: string) => void;
}

/** A target from DESIGN.md's "Numbers", and whether this run met it. */
export interface Target {
  readonly name: string;
  readonly met: boolean;
  readonly detail: string;
}

/** One scenario's outcome: one table (every client side by side), its raw figures, targets, notes. */
export interface ScenarioResult {
  readonly name: string;
  readonly title: string;
  /** The settings the run used (mock, limits, workload), for the JSON. */
  readonly settings: Readonly<Record<string, unknown>>;
  readonly headers: readonly string[];
  readonly rows: readonly (readonly string[])[];
  /** The same rows as raw numbers, for the JSON. */
  readonly figures: readonly object[];
  readonly targets: readonly Target[];
  readonly notes: readonly string[];
}

export type Scenario = (ctx: ScenarioContext) => Promise<ScenarioResult>;

/** The scenario as people read it: title, table, targets, notes. */
export function renderScenario(r: ScenarioResult): string {
  const out = [`== ${r.name}: ${r.title}`, '', renderTable(r.headers, r.rows), ''];
  for (const t of r.targets)
    out.push(`target ${t.met ? 'MET   ' : 'MISSED'} ${t.name}: ${t.detail}`);
  for (const n of r.notes) out.push(`note: ${n}`);
  return `${out.join('\n').trimEnd()}\n`;
}
