import { writeFile } from 'node:fs/promises';
import { ConfigError } from '../../shared/errors.ts';
import { VERSION } from '../../shared/version.ts';
import { killAllChildren } from './processes.ts';
import { renderScenario, type Scenario, type ScenarioResult } from './report.ts';
import { cachedScenario } from './scenarios/cached.ts';
import { chaosScenario } from './scenarios/chaos.ts';
import { clusterScenario } from './scenarios/cluster.ts';
import { documentsScenario } from './scenarios/documents.ts';
import { documentsLongScenario } from './scenarios/documents-long.ts';
import { fairnessScenario } from './scenarios/fairness.ts';
import { fleetScenario } from './scenarios/fleet.ts';
import { gatewayScenario } from './scenarios/gateway.ts';
import { httpScenario } from './scenarios/http.ts';
import { memoryScenario } from './scenarios/memory.ts';
import { neighbourExactScenario, neighbourScenario } from './scenarios/neighbour.ts';
import { overheadScenario } from './scenarios/overhead.ts';
import { poolScenario } from './scenarios/pool.ts';
import { publishedScenario } from './scenarios/published.ts';
import { refundsScenario } from './scenarios/refunds.ts';
import { scaleScenario } from './scenarios/scale.ts';
import { splitScenario } from './scenarios/split.ts';
import { tenantsScenario } from './scenarios/tenants.ts';
import { unconfiguredScenario } from './scenarios/unconfigured.ts';
import { DIFFERING_COUNTER } from './workload.ts';

/** Every scenario, in the order a full run takes them. */
export const SCENARIOS: Readonly<Record<string, Scenario>> = {
  published: publishedScenario,
  refunds: refundsScenario,
  fleet: fleetScenario,
  split: splitScenario,
  neighbour: neighbourScenario,
  'neighbour-exact': neighbourExactScenario,
  cached: cachedScenario,
  documents: documentsScenario,
  'documents-long': documentsLongScenario,
  memory: memoryScenario,
  unconfigured: unconfiguredScenario,
  fairness: fairnessScenario,
  overhead: overheadScenario,
  scale: scaleScenario,
  gateway: gatewayScenario,
  http: httpScenario,
  cluster: clusterScenario,
  chaos: chaosScenario,
  pool: poolScenario,
  tenants: tenantsScenario,
};

export interface BenchOptions {
  /** Scenario names; all of them when empty. */
  readonly scenarios?: readonly string[];
  /** Every window ÷ 10 (10 s → 1 s) and smaller workloads: about two minutes. @default false */
  readonly quick?: boolean;
  /** A tiny workload for the smoke test (see ScenarioContext.smoke); not for figures. */
  readonly smoke?: boolean;
  /**
   * How the mock counts input: `tokenizer` (its own, near llmq's estimate) or `differing`
   * (characters / 3.6 + 7 a message, an independent provider's). @default 'tokenizer'
   */
  readonly counter?: 'tokenizer' | 'differing';
  /** Write every figure as JSON here. */
  readonly json?: string | undefined;
  readonly redisUrl: string;
  /** Where each scenario's table goes as soon as it is done. @default stdout */
  readonly print?: (text: string) => void;
  /** Progress lines. @default stderr */
  readonly log?: (line: string) => void;
}

export interface BenchReport {
  readonly version: string;
  readonly quick: boolean;
  readonly startedAt: string;
  readonly host: {
    readonly cpus: number;
    readonly node: string;
    readonly loadAverage: readonly number[];
  };
  readonly scenarios: readonly ScenarioResult[];
}

/** Checks scenario names; throws a ConfigError naming the bad one and the choices. */
export function resolveScenarios(names: readonly string[] | undefined): string[] {
  const wanted = (names ?? [])
    .flatMap((n) => n.split(','))
    .map((n) => n.trim())
    .filter(Boolean);
  if (wanted.length === 0) return Object.keys(SCENARIOS);
  for (const n of wanted) {
    if (!SCENARIOS[n])
      throw new ConfigError(
        `--scenario must be one of ${Object.keys(SCENARIOS).join(', ')}, got ${JSON.stringify(n)}`,
      );
  }
  return [...new Set(wanted)];
}

/**
 * Runs the scenarios one after another against the project's mock server and a shared Redis
 * (each run under a prefix of its own, deleted afterwards), prints each one's table, and writes
 * the JSON when asked. Worker processes it started are killed if anything fails.
 */
export async function runBench(options: BenchOptions): Promise<BenchReport> {
  const names = resolveScenarios(options.scenarios);
  const print = options.print ?? ((t: string) => process.stdout.write(`${t}\n`));
  const log = options.log ?? ((l: string) => process.stderr.write(`bench: ${l}\n`));
  const smoke = options.smoke ?? false;
  const quick = (options.quick ?? false) || smoke;
  const { availableParallelism, loadavg } = await import('node:os');
  const report: BenchReport = {
    version: VERSION,
    quick,
    startedAt: new Date().toISOString(),
    host: { cpus: availableParallelism(), node: process.version, loadAverage: loadavg() },
    scenarios: [],
  };
  if (quick) {
    log(
      'quick: every window ÷ 10 (10 s → 1 s) and smaller workloads; fixed costs per window weigh ten times more, so take figures from a full run',
    );
  }
  try {
    for (const name of names) {
      const t0 = performance.now();
      log(`${name}: starting${quick ? ' (quick)' : ''}`);
      const counting = options.counter === 'differing' ? DIFFERING_COUNTER : undefined;
      const ran = await SCENARIOS[name]!({
        quick,
        smoke,
        redisUrl: options.redisUrl,
        log,
        counting,
      });
      const result = counting
        ? { ...ran, title: `${ran.title}; input counted as characters / 3.6 + 7 a message` }
        : ran;
      (report.scenarios as ScenarioResult[]).push(result);
      log(`${name}: done in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
      print(renderScenario(result));
      if (options.json) await writeFile(options.json, `${JSON.stringify(report, null, 2)}\n`);
    }
  } finally {
    killAllChildren();
  }
  return report;
}
