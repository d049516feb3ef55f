import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createProducer } from '../../../producer/create-producer.ts';
import { hashApiKey } from '../../../producer/http/api-keys.ts';
import { resolveConfig } from '../../../shared/config.ts';
import { freePort } from '../../../shared/private-redis.ts';
import { openDeadLetterQueue, openQueue } from '../../../shared/queues.ts';
import { connectRedis } from '../../../shared/redis.ts';
import { startBenchMock } from '../mock.ts';
import { benchNames } from '../redis-scope.ts';
import { startAofRedis } from '../redis-servers.ts';
import { type CallWatch, startCallWatch } from './call-watch.ts';
import type { ExitStatus } from './cli-child.ts';
import { chaosRequest, feedHttp, feedLibrary, type HttpAnswer, postJob } from './feeders.ts';
import { Fleet } from './fleet.ts';
import { QueueMonitor } from './monitor.ts';
import {
  type BatchLines,
  type JobOutcome,
  type JobSource,
  type ProviderFigures,
  providerFigures,
  readBatchLines,
  readOutcomes,
} from './outcome.ts';

export interface ChaosOptions {
  /** Jobs a producer in this process adds with `enqueueMany`. @default 240 */
  readonly libraryJobs?: number;
  /** Jobs HTTP clients post to `llmq serve`. @default 40 */
  readonly httpJobs?: number;
  /** Documents `llmq batch summarize` summarizes. @default 20 */
  readonly documents?: number;
  /** The provider's (the mock's) limit and the workers' budget, tokens per window. @default 1_500 */
  readonly limitTokens?: number;
  /** @default 4_000 */
  readonly windowMs?: number;
  /** The mock's latency per call (calls are in flight when a worker is killed). @default 600 */
  readonly latencyMs?: number;
  /** How soon a killed worker's jobs are taken up again (`LLMQ_RECOVER_AFTER`). @default 30_000 */
  readonly recoverAfterMs?: number;
  /** Redis stays down at least this long. @default 3_000 */
  readonly outageMs?: number;
  /** The run gives up waiting after this long and reports what it has. @default 240_000 */
  readonly timeoutMs?: number;
  /** Progress lines. @default none */
  readonly log?: (line: string) => void;
}

/** A step of the run, at `at` ms from its start. */
export interface ChaosEvent {
  readonly at: number;
  readonly what: string;
}

/** What the run did and what BullMQ, the mock and the results file show afterwards. */
export interface ChaosReport {
  readonly settings: Required<Omit<ChaosOptions, 'log'>>;
  /** Every acknowledged job (an id answered), once. */
  readonly jobs: readonly JobOutcome[];
  /** Jobs BullMQ completed, acknowledged or not (a 202 lost with a killed API counts here). */
  readonly completedInQueue: number;
  readonly deadLettered: number;
  readonly provider: ProviderFigures;
  /** Calls under way in the two killed workers when they died: all, and those already answered. */
  readonly cutCalls: { readonly inFlight: number; readonly answered: number };
  readonly outage: {
    readonly downMs: number;
    /** POST /v1/jobs answers from the kill until one was accepted again, by `status code`. */
    readonly answers: Readonly<Record<string, number>>;
    /** The retry-after of the first 503. */
    readonly retryAfter: string | undefined;
    /** From the restart until POST /v1/jobs answered 202 (undefined: it never did). */
    readonly recoverMs: number | undefined;
    /** From the restart until a job completed again. */
    readonly firstCompletionMs: number | undefined;
  };
  /** Failures the feeders saw and retried, by kind. */
  readonly failures: {
    readonly library: Record<string, number>;
    readonly http: Record<string, number>;
  };
  readonly batch: BatchLines & {
    readonly documents: readonly string[];
    /** Exit statuses of the batch command's runs, in order. */
    readonly runs: readonly ExitStatus[];
  };
  readonly events: readonly ChaosEvent[];
  /** Processes that ended without the run killing them. */
  readonly unexpectedExits: readonly string[];
  readonly elapsedMs: number;
  /** Why the run stopped before every job finished, if it did. */
  readonly incomplete: string | undefined;
}

const MODEL = 'claude-haiku-4-5';
const MAX_TOKENS = 16;
/** The feeders add while fewer jobs than this wait or run: they feed the whole run. */
const QUEUE_BACKLOG = 60;

/** Whole lines in a file so far (0 when it does not exist yet). */
function countLines(path: string): number {
  try {
    return readFileSync(path, 'utf8').split('\n').length - 1;
  } catch {
    return 0;
  }
}

/**
 * The chaos run: a private Redis with an append-only file, the mock, three `llmq worker`
 * processes, `llmq serve`, `llmq batch summarize`, a producer adding with `enqueueMany` and HTTP
 * clients. While the jobs run it SIGKILLs two workers (and restarts them), the API and the
 * batch command (restarted), and Redis (restarted from its AOF), then reads what happened.
 */
export async function runChaos(options: ChaosOptions = {}): Promise<ChaosReport> {
  const s = {
    libraryJobs: options.libraryJobs ?? 240,
    httpJobs: options.httpJobs ?? 40,
    documents: options.documents ?? 20,
    limitTokens: options.limitTokens ?? 1_500,
    windowMs: options.windowMs ?? 4_000,
    latencyMs: options.latencyMs ?? 600,
    outageMs: options.outageMs ?? 3_000,
    recoverAfterMs: options.recoverAfterMs ?? 30_000,
    timeoutMs: options.timeoutMs ?? 240_000,
  };
  const log = options.log ?? (() => {});
  const t0 = Date.now();
  const deadline = t0 + s.timeoutMs;
  const events: ChaosEvent[] = [];
  const event = (what: string) => {
    events.push({ at: Date.now() - t0, what });
    log(`chaos: ${((Date.now() - t0) / 1000).toFixed(1)} s ${what}`);
  };
  const total = s.libraryJobs + s.httpJobs + s.documents;

  const dir = mkdtempSync(join(tmpdir(), 'llmq-chaos-'));
  const cleanups: (() => Promise<unknown> | unknown)[] = [
    () => rmSync(dir, { recursive: true, force: true }),
  ];
  const stop = new AbortController();
  try {
    const redis = await startAofRedis();
    cleanups.push(() => redis.stop());
    const mock = await startBenchMock({
      windowMs: s.windowMs,
      limits: { tokens: s.limitTokens },
      latencyMs: s.latencyMs,
    });
    cleanups.push(() => mock.close());
    const watches: CallWatch[] = [];
    for (let i = 0; i < 3; i++) watches.push(await startCallWatch(mock.url));
    cleanups.push(() => Promise.all(watches.map((w) => w.close())));

    const names = benchNames('chaos');
    const apiKey = `sk-chaos-${randomBytes(8).toString('hex')}`;
    const port = await freePort();
    const apiUrl = `http://127.0.0.1:${port}`;
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      REDIS_URL: redis.url,
      LLMQ_QUEUE: names.queue,
      LLMQ_PREFIX: names.prefix,
      LLMQ_TPM: String(s.limitTokens),
      LLMQ_WINDOW_S: String(s.windowMs / 1000),
      LLMQ_RECOVER_AFTER: `${s.recoverAfterMs / 1000}s`,
      ANTHROPIC_API_KEY: 'sk-chaos-provider',
      ANTHROPIC_BASE_URL: mock.url,
      LLMQ_API_KEYS: `chaos:${hashApiKey(apiKey)}`,
      LLMQ_LOG_LEVEL: 'info',
    };
    const docs = join(dir, 'docs');
    mkdirSync(docs);
    const documents = Array.from({ length: s.documents }, (_, i) => {
      const path = join(docs, `doc-${String(i).padStart(3, '0')}.txt`);
      writeFileSync(
        path,
        `Report ${i}. The harbour board met on day ${i} and agreed to repaint pier ${i % 7}.\n`,
      );
      return path;
    });
    const resultsFile = join(dir, 'results.jsonl');

    const fleet = new Fleet();
    cleanups.push(() => fleet.stop());
    const workerRole = (i: number) => ({
      name: `worker ${i + 1}`,
      args: ['worker', '--concurrency', '10'],
      env: { ...env, ANTHROPIC_BASE_URL: watches[i]!.url },
      isReady: (c: { stderr(): { head: string } }) => c.stderr().head.includes('worker started'),
    });
    const serveRole = {
      name: 'serve',
      args: ['serve', '--port', String(port)],
      env,
      isReady: (c: { stdout(): string }) => c.stdout().includes(apiUrl),
    };
    const batchRole = {
      name: 'batch',
      args: [
        'batch',
        'summarize',
        docs,
        '--out',
        resultsFile,
        '--model',
        MODEL,
        '--max-tokens',
        String(MAX_TOKENS),
        '--priority',
        'default',
        '--prompt',
        'Summarize in one line.',
      ],
      env,
      // Its first progress line comes once it has checked Redis and opened its producer.
      isReady: (c: { stderr(): { head: string } }) =>
        c.stderr().head.includes('file(s), results in'),
      finishes: true,
    };
    await Promise.all([0, 1, 2].map((i) => fleet.start(workerRole(i))));
    await fleet.start(serveRole);
    event('3 workers and serve are up');
    fleet.supervise();

    const monitorRedis = connectRedis(redis.url);
    monitorRedis.on('error', () => {});
    const queue = openQueue(monitorRedis, names);
    queue.on('error', () => {});
    const dlq = openDeadLetterQueue(monitorRedis, names);
    dlq.on('error', () => {});
    const monitor = new QueueMonitor(queue);
    cleanups.push(async () => {
      monitor.stop();
      await Promise.all([queue.close(), dlq.close()]).catch(() => {});
      monitorRedis.disconnect();
    });
    const producer = createProducer(resolveConfig({ flags: {}, env }));
    cleanups.push(() => producer.close());

    const pace = { room: () => monitor.backlog < QUEUE_BACKLOG, signal: stop.signal };
    const answers: HttpAnswer[] = [];
    const library = feedLibrary({
      producer,
      total: s.libraryJobs,
      chunk: 20,
      request: (i) => chaosRequest(MODEL, MAX_TOKENS, `Chaos item ${i}: answer in a word.`),
      pace,
    });
    const http = feedHttp({
      url: apiUrl,
      apiKey,
      total: s.httpJobs,
      clients: 2,
      request: (i) => chaosRequest(MODEL, MAX_TOKENS, `HTTP item ${i}: answer in a word.`),
      pace,
      answers,
    });
    const probes: string[] = [];
    event(
      `feeding ${s.libraryJobs} jobs by enqueueMany, ${s.httpJobs} over HTTP, ${s.documents} documents`,
    );

    const left = () => Math.max(1, deadline - Date.now());
    const waitFor = async (what: string, check: () => boolean, ms = left()) => {
      const until = Date.now() + Math.min(ms, left());
      while (!check()) {
        if (Date.now() > until) {
          event(`gave up waiting for ${what}`);
          return false;
        }
        await sleep(50);
      }
      return true;
    };

    // 1. Two workers, while both have calls under way.
    await waitFor('10% completed', () => monitor.completed >= 0.1 * total);
    await waitFor(
      'calls in flight in workers 1 and 2',
      () => watches[0]!.inFlight() > 0 && watches[1]!.inFlight() > 0,
      30_000,
    );
    const cutCalls = {
      inFlight: watches[0]!.inFlight() + watches[1]!.inFlight(),
      answered: watches[0]!.answeredInFlight() + watches[1]!.answeredInFlight(),
    };
    await Promise.all([fleet.get('worker 1').kill(), fleet.get('worker 2').kill()]);
    event(
      `SIGKILL workers 1 and 2 (${cutCalls.inFlight} calls in flight, ${cutCalls.answered} answered)`,
    );
    await Promise.all([fleet.start(workerRole(0)), fleet.start(workerRole(1))]);
    event('workers 1 and 2 restarted');

    // 2. The batch command, started now so that its documents share the queue with the rest,
    // killed once some of its lines are written, with the HTTP API.
    await fleet.start(batchRole);
    event(`batch summarize started on ${s.documents} documents`);
    await waitFor(
      'a quarter of the batch written',
      () => countLines(resultsFile) >= Math.max(1, Math.floor(s.documents / 4)),
      90_000,
    );
    await Promise.all([fleet.get('serve').kill(), fleet.get('batch').kill()]);
    event(`SIGKILL serve and batch (${countLines(resultsFile)} of ${s.documents} lines written)`);
    await Promise.all([fleet.start(serveRole), fleet.start(batchRole)]);
    event('serve and batch restarted');

    // 3. Redis, restarted from its AOF; the API must answer 503 meanwhile and recover by itself.
    await waitFor('45% completed', () => monitor.completed >= 0.45 * total);
    const probe = async (n: number) => {
      const a = await postJob(
        apiUrl,
        apiKey,
        {
          request: chaosRequest(MODEL, MAX_TOKENS, `Probe ${n}: answer in a word.`),
          idempotency_key: `chaos-probe-${n}`,
        },
        10_000,
      );
      answers.push(a);
      if (a.id) probes.push(a.id);
      return a;
    };
    const killAt = Date.now();
    await redis.kill();
    event('SIGKILL redis-server');
    let n = 0;
    let first503: HttpAnswer | undefined;
    while ((Date.now() - killAt < s.outageMs || !first503) && Date.now() - killAt < 30_000) {
      const a = await probe(n++);
      if (a.status === 503) first503 ??= a;
      await sleep(100);
    }
    const restartAt = Date.now();
    await redis.restart();
    event(`redis-server restarted from its AOF after ${restartAt - killAt} ms down`);
    let recoverMs: number | undefined;
    while (Date.now() - restartAt < 60_000) {
      if ((await probe(n++)).id) {
        recoverMs = Date.now() - restartAt;
        break;
      }
      await sleep(100);
    }
    const recoveredAt = Date.now();
    event(
      recoverMs === undefined
        ? 'the API did not accept a job again'
        : `the API accepts jobs again after ${recoverMs} ms`,
    );
    const completedBefore = monitor.completedAt;
    await waitFor(
      'a job completed after the restart',
      () => monitor.completedAt > Math.max(restartAt, completedBefore),
      60_000,
    );
    const firstCompletionMs =
      monitor.completedAt > restartAt ? monitor.completedAt - restartAt : undefined;

    // 4. Everything acknowledged, done.
    let fedAt: number | undefined;
    void Promise.all([library.done, http.done]).then(() => {
      fedAt = Date.now();
    });
    const finished = await waitFor(
      'every job finished',
      () => fedAt !== undefined && fleet.finished('batch') && monitor.settled(fedAt),
    );
    event(finished ? 'every job finished' : 'stopped before every job finished');
    stop.abort();
    await fleet.stop();

    const stats = await mock.stats();
    const batchLines = readBatchLines(resultsFile);
    const acknowledged: { id: string; source: JobSource }[] = [
      ...library.acknowledged.map((id) => ({ id, source: 'library' as const })),
      ...[...http.acknowledged, ...probes].map((id) => ({ id, source: 'http' as const })),
      ...batchLines.ids.map((id) => ({ id, source: 'batch' as const })),
    ];
    const jobs = await readOutcomes(queue, monitorRedis, names, acknowledged);
    const counts = await queue.getJobCounts('completed');
    const deadLettered = await dlq.getJobCounts(
      'waiting',
      'prioritized',
      'delayed',
      'failed',
      'completed',
    );
    const outageAnswers: Record<string, number> = {};
    for (const a of answers) {
      if (a.at < killAt || a.at > recoveredAt) continue;
      const k = a.code ? `${a.status} ${a.code}` : String(a.status);
      outageAnswers[k] = (outageAnswers[k] ?? 0) + 1;
    }
    return {
      settings: s,
      jobs,
      completedInQueue: counts['completed'] ?? 0,
      deadLettered: Object.values(deadLettered).reduce((a, b) => a + b, 0),
      provider: providerFigures(stats, counts['completed'] ?? 0),
      cutCalls,
      outage: {
        downMs: restartAt - killAt,
        answers: outageAnswers,
        retryAfter: first503?.retryAfter,
        recoverMs,
        firstCompletionMs,
      },
      failures: { library: library.failures, http: http.failures },
      batch: { ...batchLines, documents, runs: fleet.runs.get('batch') ?? [] },
      events,
      unexpectedExits: fleet.unexpectedExits,
      elapsedMs: Date.now() - t0,
      incomplete: finished ? undefined : `not every job finished within ${s.timeoutMs} ms`,
    };
  } finally {
    stop.abort();
    // Each step bounded: a close that waits on a Redis that is gone must not hold the run.
    for (const c of cleanups.reverse())
      await Promise.race([
        Promise.resolve()
          .then(c)
          .catch(() => {}),
        sleep(10_000),
      ]);
  }
}
