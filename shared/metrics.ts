import { Batcher } from './batcher.ts';
import {
  addCall,
  counterFields,
  FLEET_SERIES,
  type HistoryCall,
  newBatch,
  writeHistory,
} from './history.ts';
import { llmqKey, type QueueNames } from './keys.ts';
import { loadLuaScripts, runLua } from './lua-scripts.ts';
import type { RedisClient } from './redis.ts';
import {
  histogramFields,
  LabelCap,
  MAX_MODELS,
  MAX_TENANTS,
  NO_TENANT,
} from './telemetry/histograms.ts';

/**
 * Counters every worker process adds to in Redis, so one dashboard (and `/metrics`) sees the
 * whole fleet. One hash per queue; fields are listed in {@link MetricField}.
 */
export type MetricField =
  | 'provider_calls'
  | 'provider_ok'
  | 'provider_429_retry_after'
  | 'provider_429_final'
  | 'provider_5xx'
  | 'provider_connection_errors'
  | 'provider_4xx'
  | 'retries'
  | 'deferred_by_scope'
  | 'deferred_by_budget'
  | 'backfilled'
  | 'dead_lettered'
  /** Dead letters dropped by the dead-letter bounds, and their bytes (worker/lua/keepDead-5.lua). */
  | 'dead_letters_dropped'
  | 'dead_letter_bytes_dropped'
  /** Finished jobs dropped by the results' bytes bound (worker/lua/keepRecord-6.lua). */
  | 'results_dropped'
  | 'completed'
  /** Calls made twice: a worker resumed past its lock found another had taken its job. */
  | 'duplicate_calls'
  | 'latency_sum_ms'
  | 'latency_count'
  | 'tokens_in'
  | 'tokens_out';

/** Upper bounds (ms) of the provider latency histogram's buckets. */
export const LATENCY_BUCKETS_MS = [
  50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 120_000,
] as const;

/**
 * The outcomes a pool deployment's calls are counted by, each in field `d|<name>|<outcome>`
 * (and every call in `d|<name>|calls`): `5xx` takes the 529s too, `429` both kinds.
 */
export const DEPLOYMENT_OUTCOMES = ['ok', '429', '5xx', '4xx', 'connection_error'] as const;
export type DeploymentOutcome = (typeof DEPLOYMENT_OUTCOMES)[number];

/** At most this many deployments a process has seen are counted by name; others as `other`. */
export const MAX_DEPLOYMENTS = 32;

/** The metrics field of a deployment's calls, or of its calls with one outcome. */
export const deploymentField = (name: string, outcome: DeploymentOutcome | 'calls'): string =>
  `d|${name}|${outcome}`;

/** Which deployment counter each provider counter adds to as well. */
const DEPLOYMENT_COUNTER: Partial<Record<string, DeploymentOutcome | 'calls'>> = {
  provider_calls: 'calls',
  provider_ok: 'ok',
  provider_429_retry_after: '429',
  provider_429_final: '429',
  provider_5xx: '5xx',
  provider_4xx: '4xx',
  provider_connection_errors: 'connection_error',
};

export function metricsKey(names: QueueNames): string {
  return llmqKey(names, 'metrics');
}

const SCRIPTS = loadLuaScripts(new URL('./lua', import.meta.url).pathname);

/**
 * Fields one count script adds at most (about 0.3 ms of Redis): a flush with more (many
 * tenants' histograms) goes in several, each series' fields (`h|wait|<model>|<tenant>|…`)
 * together in one.
 */
export const COUNT_FIELDS_PER_CALL = 256;

/** `add`'s fields and increments as the arguments of one count call or more. */
export function countChunks(add: Record<string, number>): (string | number)[][] {
  const series = (field: string) => field.slice(0, field.lastIndexOf('|') + 1);
  const fields = Object.keys(add)
    .filter((f) => add[f])
    .sort();
  const chunks: (string | number)[][] = [[]];
  fields.forEach((f, i) => {
    const chunk = chunks.at(-1)!;
    const full = chunk.length / 2 >= COUNT_FIELDS_PER_CALL;
    if (full && series(f) !== series(fields[i - 1]!)) chunks.push([f, add[f]!]);
    else chunk.push(f, add[f]!);
  });
  return chunks;
}

type MetricsItem = {
  readonly latencyMs: number | undefined;
  /** Named counters, and the labelled histograms' fields (`telemetry/histograms.ts`). */
  readonly add: Partial<Record<MetricField, number>> | Record<string, number>;
  /** The call, for the usage history (`history.ts`). */
  readonly call?: HistoryCall | undefined;
};

/**
 * One finished call, for the histograms labelled by model and tenant and the usage history. A
 * successful one (`ok`) is also counted in the provider latency histogram.
 */
export type JobObservation = HistoryCall;

/**
 * How long a successful call's counters wait for others before they are written: a worker
 * finishing hundreds of calls a second writes its counters some ten times a second, not once
 * for every few calls. The dashboard's figures are that much later.
 */
export const METRICS_FLUSH_MS = 100;

/**
 * A worker's counters on their way to Redis, gathered into one command: a successful call's
 * for up to {@link METRICS_FLUSH_MS}, anything else (failures, retries, dead letters: rare, and
 * read by whoever watches them happen) to the end of the turn of the event loop, taking what
 * waits along. Each promise settles when its part is written.
 */
export class MetricsWriter {
  private readonly batcher: Batcher<MetricsItem, void>;
  private readonly models = new LabelCap(MAX_MODELS);
  private readonly tenants = new LabelCap(MAX_TENANTS);
  private readonly deployments = new LabelCap(MAX_DEPLOYMENTS);

  /**
   * @param options.flushMs how long a successful call's counters wait @default METRICS_FLUSH_MS
   * @param options.clock the history's clock (tests); @default Redis's TIME
   */
  constructor(
    redis: RedisClient,
    names: QueueNames,
    options: { readonly flushMs?: number; readonly clock?: () => number } = {},
  ) {
    const key = metricsKey(names);
    this.batcher = new Batcher<MetricsItem, void>(
      async (items) => {
        const sums: Record<string, number> = {};
        const latencies: number[] = [];
        const batch = newBatch();
        const at = Date.now();
        for (const { latencyMs, add, call } of items) {
          if (latencyMs !== undefined) latencies.push(Math.max(0, latencyMs));
          for (const [f, n] of Object.entries(add)) sums[f] = (sums[f] ?? 0) + n;
          if (call) addCall(batch, call, at);
        }
        counterFields(sums, batch.series[FLEET_SERIES]);
        // The latencies go with the first call; the buckets' bounds with each.
        const calls = countChunks(sums).map((fields, i) => [
          i === 0 ? latencies.join(',') : '',
          LATENCY_BUCKETS_MS.join(','),
          ...fields,
        ]);
        await Promise.all([
          ...calls.map((args) => runLua(redis, SCRIPTS['count']!, [key], args)),
          writeHistory(redis, names, batch, options.clock?.()),
        ]);
        return [];
      },
      { delayMs: options.flushMs ?? METRICS_FLUSH_MS },
    );
  }

  /** Adds to counters; a call's provider counters to its deployment's too, when given. */
  add(add: Partial<Record<MetricField, number>>, deployment?: string): Promise<void> {
    return this.batcher.push({ latencyMs: undefined, add: this.of(add, deployment) }, true);
  }

  /** The counters with the deployment's (bounded by {@link MAX_DEPLOYMENTS}) added. */
  private of(
    add: Partial<Record<MetricField, number>>,
    deployment: string | undefined,
  ): Record<string, number> {
    const out: Record<string, number> = { ...add };
    if (deployment === undefined) return out;
    const name = this.deployments.label(deployment);
    for (const [f, n] of Object.entries(add)) {
      const outcome = DEPLOYMENT_COUNTER[f];
      if (!outcome || !n) continue;
      const field = deploymentField(name, outcome);
      out[field] = (out[field] ?? 0) + n;
    }
    return out;
  }

  /**
   * Records one provider call's latency in the histogram, with other counters; written within
   * {@link METRICS_FLUSH_MS}.
   */
  latency(ms: number, add: Partial<Record<MetricField, number>> = {}): Promise<void> {
    return this.batcher.push({ latencyMs: ms, add });
  }

  /**
   * Records a call in the wait, call and token histograms of its model and tenant (bounded
   * label sets), with other counters (its deployment's too, when given); written within
   * {@link METRICS_FLUSH_MS}.
   */
  observe(
    o: JobObservation,
    add: Partial<Record<MetricField, number>> = {},
    deployment?: string,
  ): Promise<void> {
    const model = this.models.label(o.model);
    const tenant = o.tenant === undefined ? NO_TENANT : this.tenants.label(o.tenant);
    const fields = this.of(add, deployment);
    histogramFields('wait', model, tenant, o.waitMs, fields);
    histogramFields('call', model, tenant, o.callMs, fields);
    if (o.inputTokens !== undefined) histogramFields('input', model, tenant, o.inputTokens, fields);
    if (o.outputTokens !== undefined)
      histogramFields('output', model, tenant, o.outputTokens, fields);
    return this.batcher.push({ latencyMs: o.ok ? o.callMs : undefined, add: fields, call: o });
  }
}

export async function readMetrics(
  redis: RedisClient,
  names: QueueNames,
): Promise<Record<string, number>> {
  const raw = await redis.hgetall(metricsKey(names));
  return Object.fromEntries(Object.entries(raw).map(([k, v]) => [k, Number(v)]));
}

/**
 * The median provider latency the fleet recorded (ms), read from the histogram's buckets as
 * Prometheus' histogram_quantile does (linear within the bucket); 0 before the first call. The
 * median, not the mean: a few slow calls (cold connections, a stalled one) do not move it.
 */
export function medianLatencyMs(metrics: Readonly<Record<string, number>>): number {
  const n = metrics['latency_count'] ?? 0;
  if (n <= 0) return 0;
  const half = n / 2;
  let lower = 0;
  let below = 0;
  for (const le of LATENCY_BUCKETS_MS) {
    const c = metrics[`le_${le}`] ?? below;
    if (c >= half) return c === below ? le : lower + ((le - lower) * (half - below)) / (c - below);
    lower = le;
    below = c;
  }
  return LATENCY_BUCKETS_MS.at(-1)!;
}
