/**
 * The pool scenario's parts: three mock deployments (the Claude API's path, Bedrock's, Vertex
 * AI's), their configs as `llmq worker` reads them, what each job did (from its history), and a
 * watch of a deployment's breaker.
 */

import type { Producer } from '../../../producer/producer.ts';
import type { DeploymentConfig, DeploymentKind } from '../../../shared/deployments.ts';
import type { AttemptRecord, JobData, JobResult } from '../../../shared/job.ts';
import { maxTokensOf } from '../../../shared/job-kept.ts';
import { breakerKey, bullPrefix, type QueueNames } from '../../../shared/keys.ts';
import type { LlmqQueue } from '../../../shared/queues.ts';
import type { RedisClient } from '../../../shared/redis.ts';
import type { MockStats } from '../../../testing/mock-anthropic/index.ts';
import { type BenchRequest, MODEL, prng, sizedCall } from '../workload.ts';

/** One deployment of the scenario: its name, platform and tokens per window. */
export interface PoolMember {
  readonly name: string;
  readonly kind: DeploymentKind;
  readonly limit: number;
}

export const MEMBERS: readonly PoolMember[] = [
  { name: 'claude', kind: 'anthropic', limit: 4_000 },
  { name: 'bedrock', kind: 'bedrock', limit: 8_000 },
  { name: 'vertex', kind: 'vertex', limit: 12_000 },
];

/** Fake credentials for the mock, by the variable names the configs give. */
export const POOL_ENV: Readonly<Record<string, string>> = {
  BENCH_POOL_KEY: 'sk-bench-pool-key',
  BENCH_POOL_AWS_ID: 'AKIDBENCHPOOL',
  BENCH_POOL_AWS_SECRET: 'bench-pool-aws-secret',
  BENCH_POOL_GCP_TOKEN: 'bench-pool-gcp-token',
};

/**
 * A member's config on the mock at `url`. The Claude API's limits come from its
 * `anthropic-ratelimit-*` headers (the mock sends them on `/v1/messages`); Bedrock and Vertex
 * AI send none (nor does the mock on their paths), so their limits are configured.
 */
export function deploymentOf(m: PoolMember, url: string): DeploymentConfig {
  if (m.kind === 'anthropic')
    return {
      name: m.name,
      kind: m.kind,
      baseUrl: url,
      credentials: { apiKeyEnv: 'BENCH_POOL_KEY' },
    };
  const limits = { tpm: m.limit };
  if (m.kind === 'bedrock')
    return {
      name: m.name,
      kind: m.kind,
      region: 'us-east-1',
      baseUrl: url,
      credentials: {
        awsAccessKeyEnv: 'BENCH_POOL_AWS_ID',
        awsSecretKeyEnv: 'BENCH_POOL_AWS_SECRET',
      },
      models: { 'claude-sonnet-*': `anthropic.${MODEL}-v1:0` },
      limits,
    };
  return {
    name: m.name,
    kind: m.kind,
    region: 'us-east5',
    projectId: 'bench-pool',
    baseUrl: `${url}/v1`,
    credentials: { accessTokenEnv: 'BENCH_POOL_GCP_TOKEN' },
    models: { 'claude-sonnet-*': `${MODEL}@20260101` },
    limits,
  };
}

/** What one job did: where it ended, when that call began, its charge, and its failed tries. */
export interface JobEnd {
  readonly id: string;
  readonly deployment: string | undefined;
  /** When the successful call began (ms since the epoch); NaN if the job did not complete. */
  readonly admittedAt: number;
  /** What the mock charged it: input + max_tokens (`reserve`). */
  readonly charge: number;
  /** Its history: the tries that failed (the successful one is in its result). */
  readonly tries: readonly AttemptRecord[];
}

/** Each job's end, read from BullMQ (completed jobs are kept with their history). */
export async function jobEnds(queue: LlmqQueue, ids: readonly string[]): Promise<JobEnd[]> {
  return Promise.all(
    ids.map(async (id) => {
      const job = await queue.getJob(id);
      const data = job?.data as JobData | undefined;
      const result = job?.returnvalue as JobResult | undefined;
      const input = result?.message.usage.input_tokens ?? 0;
      // Set as the job went active: for llmq, once the gate admitted it, just before its call.
      const active = job?.processedOn ?? Number.NaN;
      return {
        id,
        deployment: result?.deployment,
        // A job moved after a failed call stays active: its successful call began after it.
        admittedAt: !result
          ? Number.NaN
          : data?.history?.length
            ? Math.max(active, result.completedAt - result.latencyMs)
            : active,
        charge: result ? input + (maxTokensOf(data) ?? 0) : 0,
        tries: data?.history ?? [],
      };
    }),
  );
}

/** `completed` events per job id, from BullMQ's event stream: 1 each when none ran twice. */
export async function completedEvents(
  redis: RedisClient,
  names: QueueNames,
): Promise<Map<string, number>> {
  const key = `${bullPrefix(names)}:${names.queue}:events`;
  const entries = (await redis.xrange(key, '-', '+')) as [string, string[]][];
  const out = new Map<string, number>();
  for (const [, fields] of entries) {
    const f: Record<string, string> = {};
    for (let i = 0; i + 1 < fields.length; i += 2) f[fields[i]!] = fields[i + 1]!;
    if (f['event'] === 'completed' && f['jobId'])
      out.set(f['jobId'], (out.get(f['jobId']) ?? 0) + 1);
  }
  return out;
}

/** A change of a breaker's state, as sampled. */
export interface BreakerChange {
  readonly at: number;
  readonly state: string;
}

/** Samples a deployment's breaker every `everyMs` until `stop()`; resolves with its changes. */
export function watchBreaker(
  redis: RedisClient,
  names: QueueNames,
  deployment: string,
  everyMs = 20,
): { stop(): Promise<BreakerChange[]> } {
  const changes: BreakerChange[] = [];
  let last = 'closed';
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const state = (await redis.hget(breakerKey(names, deployment), 'state')) ?? 'closed';
      if (state !== last) changes.push({ at: Date.now(), state });
      last = state;
      await new Promise((r) => setTimeout(r, everyMs));
    }
  })();
  return {
    async stop() {
      stopped = true;
      await loop;
      return changes;
    },
  };
}

/** 429s a mock answered, from its stats (any path). */
export const rateLimitedOf = (s: MockStats): number => s.responses['429'] ?? 0;

/** 200s a mock answered, less an earlier snapshot's. */
export const answeredSince = (s: MockStats, before?: MockStats): number =>
  (s.responses['200'] ?? 0) - (before?.responses['200'] ?? 0);

/** Jobs of 400 to 800 tokens, ids from `from`, drawn from a fixed seed. */
export function poolCalls(n: number, from: number): BenchRequest[] {
  const next = prng(from + 11);
  return Array.from({ length: n }, (_, i) => sizedCall(from + i, Math.round(400 + 400 * next())));
}

/** Enqueues the requests; resolves once each has completed or failed, with how many failed. */
export async function runJobs(
  run: { readonly producer: Producer },
  requests: readonly BenchRequest[],
) {
  const ids = await run.producer.enqueueMany(requests);
  let failed = 0;
  const done = Promise.all(
    ids.map((id) =>
      run.producer.waitForResult(id, { timeout: 600_000 }).catch(() => {
        failed++;
      }),
    ),
  ).then(() => failed);
  return { ids, done };
}
