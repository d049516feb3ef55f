import { loadavg } from 'node:os';
import { hashApiKey } from '../../../producer/http/api-keys.ts';
import { bullPrefix, type QueueNames } from '../../../shared/keys.ts';
import type { RedisClient } from '../../../shared/redis.ts';
import { runHttpLoad } from '../http-load.ts';
import { withBenchScope } from '../redis-scope.ts';
import type { ScenarioContext, ScenarioResult } from '../report.ts';
import { ServeProcess } from '../serve-process.ts';
import { count, megabytes, millis, percentile, seconds } from '../table.ts';

const TENANTS = ['acme', 'beta', 'gamma', 'delta'];
const keyOf = (tenant: string) => `sk-bench-http-${tenant}`;

/** The job API's body: a short Messages request, one per client and turn. */
const jobBody = (i: number, n: number) => ({
  request: {
    model: 'claude-test-1',
    max_tokens: 50,
    messages: [{ role: 'user', content: `Client ${i}, request ${n}: say hello.` }],
  },
});

/** Which of `ids` have no job hash in the queue (pipelined EXISTS, a thousand at a time). */
async function missingJobs(
  redis: RedisClient,
  names: QueueNames,
  ids: readonly string[],
): Promise<string[]> {
  const base = `${bullPrefix(names)}:${names.queue}:`;
  const missing: string[] = [];
  for (let i = 0; i < ids.length; i += 1_000) {
    const chunk = ids.slice(i, i + 1_000);
    const pipe = redis.pipeline();
    for (const id of chunk) pipe.exists(base + id);
    const replies = (await pipe.exec()) ?? [];
    replies.forEach(([err, n], k) => {
      if (err || n !== 1) missing.push(chunk[k]!);
    });
  }
  return missing;
}

/** Jobs the queue holds in every state. */
async function jobsInQueue(redis: RedisClient, names: QueueNames): Promise<number> {
  const base = `${bullPrefix(names)}:${names.queue}:`;
  const [wait, paused, prioritized, delayed, active, completed, failed] = await Promise.all([
    redis.llen(`${base}wait`),
    redis.llen(`${base}paused`),
    redis.zcard(`${base}prioritized`),
    redis.zcard(`${base}delayed`),
    redis.llen(`${base}active`),
    redis.zcard(`${base}completed`),
    redis.zcard(`${base}failed`),
  ]);
  return wait + paused + prioritized + delayed + active + completed + failed;
}

/**
 * `POST /v1/jobs` under load: `llmq serve` in a process of its own (the CLI, as a user runs it),
 * 1,000 closed-loop clients of four tenants on keep-alive connections for 60 s. No worker
 * drains the queue: the figures are the API's and Redis's alone. Afterwards every id answered
 * 202 is looked up in the queue.
 */
export async function httpScenario(ctx: ScenarioContext): Promise<ScenarioResult> {
  const clients = ctx.smoke ? 20 : ctx.quick ? 200 : 1_000;
  const durationMs = ctx.smoke ? 1_500 : ctx.quick ? 3_000 : 60_000;
  const rampMs = ctx.smoke ? 200 : 1_000;
  const run = await withBenchScope(ctx.redisUrl, 'http', async (redis, names) => {
    const serve = await ServeProcess.start({
      REDIS_URL: ctx.redisUrl,
      LLMQ_QUEUE: names.queue,
      LLMQ_PREFIX: names.prefix,
      LLMQ_API_KEYS: TENANTS.map((t) => `${t}:${hashApiKey(keyOf(t))}`).join(','),
      // Unbounded: a minute of this load is tens of thousands of waiting jobs.
      LLMQ_MAX_DEPTH: '0',
      LLMQ_LOG_LEVEL: 'warn',
    });
    try {
      ctx.log(
        `http: ${clients} clients against llmq serve (pid ${serve.pid}) for ${seconds(durationMs, 0)}`,
      );
      const load = await runHttpLoad({
        url: serve.url,
        path: '/v1/jobs',
        clients,
        durationMs,
        rampMs,
        keys: TENANTS.map(keyOf),
        body: jobBody,
      });
      const loadAfter = loadavg();
      const peakRss = serve.peakRssBytes();
      const unique = new Set(load.accepted);
      const missing = await missingJobs(redis, names, [...unique]);
      const held = await jobsInQueue(redis, names);
      const exit = await serve.stop();
      return { load, loadAfter, peakRss, unique: unique.size, missing, held, exit };
    } catch (err) {
      await serve.stop();
      throw new Error(`${(err as Error).message}; llmq serve said: ${serve.stderr().trim()}`);
    }
  });
  const { load } = run;
  const rps = (load.requests / load.wallMs) * 1_000;
  const p50 = percentile(load.latenciesMs, 50);
  const p99 = percentile(load.latenciesMs, 99);
  const statuses = Object.entries(load.byStatus).sort(([a], [b]) => a.localeCompare(b));
  const fiveHundreds = statuses.filter(([s]) => /^5\d\d$/.test(s)).reduce((n, [, k]) => n + k, 0);
  const lost = run.missing.length;
  return {
    name: 'http',
    title: `POST /v1/jobs through llmq serve: ${count(clients)} clients for ${seconds(durationMs, 0)}`,
    settings: { clients, durationMs, rampMs, tenants: TENANTS.length, maxDepth: 0, workers: 0 },
    headers: [
      'clients',
      'requests',
      'requests/s',
      'latency p50 / p99',
      'answers',
      'serve peak RSS',
      'accepted ids found',
    ],
    rows: [
      [
        count(clients),
        count(load.requests),
        count(rps),
        `${millis(p50, 1)} / ${millis(p99, 1)}`,
        statuses.map(([s, n]) => `${s} ×${count(n)}`).join(', '),
        megabytes(run.peakRss),
        `${count(run.unique - lost)}/${count(run.unique)}`,
      ],
    ],
    figures: [
      {
        clients,
        durationMs,
        requests: load.requests,
        wallMs: load.wallMs,
        requestsPerSecond: rps,
        p50Ms: p50,
        p99Ms: p99,
        maxMs: load.latenciesMs.reduce((m, v) => Math.max(m, v), 0),
        byStatus: load.byStatus,
        accepted: load.accepted.length,
        acceptedUnique: run.unique,
        missing: run.missing.slice(0, 20),
        jobsInQueue: run.held,
        servePeakRssBytes: run.peakRss ?? null,
        serveExit: run.exit,
        loadAverageAfter: run.loadAfter,
      },
    ],
    targets: [
      { name: 'no 5xx answer', met: fiveHundreds === 0, detail: count(fiveHundreds) },
      {
        name: 'no lost job (every 202 id is in the queue)',
        met: lost === 0 && run.unique === load.accepted.length && run.unique > 0,
        detail: `${count(lost)} missing of ${count(run.unique)}`,
      },
    ],
    notes: [
      `llmq serve runs as its own process (the CLI); the clients share the bench's process, one keep-alive connection each, starting over ${seconds(rampMs, 1)}; each sends its next request when the last is answered.`,
      'No worker runs: the jobs stay waiting, so the figures are the API and Redis alone (LLMQ_MAX_DEPTH=0, no depth bound).',
      `The queue held ${count(run.held)} jobs afterwards; more than the ids answered 202 would be jobs added behind a request that timed out on the client.`,
      `Load average after the run: ${run.loadAfter.map((l) => l.toFixed(1)).join(' / ')} (1 / 5 / 15 min).`,
    ],
  };
}
