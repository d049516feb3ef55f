/**
 * One bench worker process. Started by the bench (`fork`, with an IPC channel) or by hand:
 *
 *   LLMQ_BENCH_WORKER='{"mode":"llmq","redisUrl":"redis://127.0.0.1:6379",...}' \
 *     node --import tsx scripts/bench/worker-process.ts
 *
 * Under the bench it connects, says `ready`, starts pulling on `go`, and on `stop` (or when the
 * parent goes away) stops, sends its report and exits. By hand it starts at once and prints its
 * report as JSON on stdout after SIGTERM or SIGINT.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { writeHeapSnapshot } from 'node:v8';
import { type Job, Worker } from 'bullmq';
import type { JobData, JobResult } from '../../shared/job.ts';
import { bullPrefix } from '../../shared/keys.ts';
import { connectRedis, duplicateRedis } from '../../shared/redis.ts';
import { createPoolEntries } from '../../worker/deployment-clients.ts';
import { callProvider } from '../../worker/provider.ts';
import { startWorker } from '../../worker/worker.ts';
import { countRedisCommands } from './command-counter.ts';
import { instantProvider } from './instant-provider.ts';
import { benchProviderClient } from './provider-client.ts';
import { CallRecorder } from './recorder.ts';
import type {
  FromWorker,
  ToWorker,
  WorkerProcessConfig,
  WorkerProcessReport,
} from './worker-protocol.ts';

const raw = process.env['LLMQ_BENCH_WORKER'] ?? process.argv[2];
if (!raw) {
  process.stderr.write(
    'worker-process: set LLMQ_BENCH_WORKER (or pass the config as the first argument)\n',
  );
  process.exit(2);
}
const config = JSON.parse(raw) as WorkerProcessConfig;
const send = (m: FromWorker) => process.send?.(m);

// Patched before any connection exists, so every one of them is counted.
const counter = config.countCommands ? await countRedisCommands() : undefined;
const redis = connectRedis(config.redisUrl);
redis.on('error', (err) =>
  process.stderr.write(`worker-process ${process.pid}: redis: ${err.message}\n`),
);
const recorder = new CallRecorder({
  mode: config.record ?? 'counts',
  output: config.recordOutput ?? false,
  counting: config.counting,
});
const client = config.mockUrl ? benchProviderClient(config.mockUrl, recorder) : undefined;

let stopFn: ((graceMs: number) => Promise<void>) | undefined;
let idleRss = 0;
let idleHeap = 0;
let peakRss = 0;
let peakHeap = 0;
let sampler: NodeJS.Timeout | undefined;
let cpuAtGo: NodeJS.CpuUsage | undefined;

async function go(): Promise<void> {
  cpuAtGo = process.cpuUsage();
  counter?.reset();
  (globalThis as { gc?: () => void }).gc?.();
  idleRss = process.memoryUsage.rss();
  idleHeap = process.memoryUsage().heapUsed;
  const sample = () => {
    const m = process.memoryUsage();
    peakRss = Math.max(peakRss, m.rss);
    peakHeap = Math.max(peakHeap, m.heapUsed);
  };
  sample();
  sampler = setInterval(sample, 100);
  if (config.mode === 'llmq' || config.mode === 'llmq-instant') {
    const instant = config.mode === 'llmq-instant';
    if ((!client && !instant && !config.deployments) || !config.limiter)
      throw new Error('llmq mode needs mockUrl (or deployments) and limiter');
    const pool = config.deployments
      ? {
          deployments: await createPoolEntries(config.deployments, {
            ...process.env,
            ...config.env,
          }),
        }
      : undefined;
    const handle = await startWorker({
      redis,
      names: config.names,
      ...(pool ?? (instant ? { provider: instantProvider(config.providerDelayMs) } : { client })),
      ...(config.breaker ? { breaker: config.breaker } : {}),
      limiter: config.limiter,
      concurrency: config.concurrency,
      maxInFlight: config.maxInFlight,
      ...(config.fairShare ? { fairShare: config.fairShare } : {}),
      ...(config.firstByteTimeoutMs ? { firstByteTimeoutMs: config.firstByteTimeoutMs } : {}),
      feedback: config.feedback ?? true,
      stream: 'always',
    });
    stopFn = (graceMs) => handle.stop(graceMs);
    return;
  }
  // `bare-script`: one trivial script per job on a connection of its own, the least any gate
  // that decides each call in Redis adds.
  const scriptKey = `${bullPrefix(config.names)}:bench-one`;
  const one = config.mode === 'bare-script' ? duplicateRedis(redis) : undefined;
  one?.defineCommand('benchOne', { numberOfKeys: 1, lua: "return redis.call('INCR', KEYS[1])" });
  const processor =
    config.mode === 'bare'
      ? async () => {
          if (config.providerDelayMs) await sleep(config.providerDelayMs);
          return null;
        }
      : config.mode === 'bare-script'
        ? async () => {
            await (one as unknown as { benchOne(k: string): Promise<number> }).benchOne(scriptKey);
            return null;
          }
        : async (job: Job<JobData, JobResult | null>): Promise<JobResult> => {
            const res = await callProvider(client!, job.data.request, {
              stream: true,
              timeoutMs: 600_000,
            });
            return {
              message: res.message,
              latencyMs: Math.round(res.latencyMs),
              requestId: res.requestId,
              attempts: 1,
              completedAt: Date.now(),
            };
          };
  const worker = new Worker<JobData, JobResult | null>(config.names.queue, processor, {
    connection: duplicateRedis(redis),
    prefix: bullPrefix(config.names),
    concurrency: config.concurrency,
  });
  worker.on('error', (err) =>
    process.stderr.write(`worker-process ${process.pid}: bullmq: ${err.message}\n`),
  );
  stopFn = async () => {
    await worker.close();
    await one?.quit().catch(() => one.disconnect());
    await (worker.opts.connection as typeof redis).quit().catch(() => {});
  };
}

let stopping: Promise<void> | undefined;
function stop(graceMs = 30_000): Promise<void> {
  stopping ??= (async () => {
    // LLMQ_BENCH_HEAP_SNAPSHOT=DIR: a heap snapshot of what the worker holds once its jobs are
    // done, for hunting leaks.
    const snapshotDir = process.env['LLMQ_BENCH_HEAP_SNAPSHOT'];
    if (snapshotDir) writeHeapSnapshot(`${snapshotDir}/worker-${process.pid}.heapsnapshot`);
    await stopFn?.(graceMs);
    clearInterval(sampler);
    const cpu = process.cpuUsage(cpuAtGo);
    const report: WorkerProcessReport = {
      pid: process.pid,
      calls: await recorder.report(),
      peakRssBytes: peakRss,
      idleRssBytes: idleRss,
      compiled: import.meta.url.endsWith('.js'),
      idleHeapBytes: idleHeap,
      peakHeapBytes: peakHeap,
      cpuMs: (cpu.user + cpu.system) / 1000,
      redis: counter?.snapshot(),
    };
    await redis.quit().catch(() => redis.disconnect());
    if (process.send) {
      // Let go of the channel only once the report is on its way.
      await new Promise<void>((resolve) =>
        process.send!({ type: 'report', report } satisfies FromWorker, () => resolve()),
      );
      process.disconnect();
    } else {
      process.stdout.write(`${JSON.stringify(report)}\n`);
    }
  })();
  return stopping;
}

function fail(err: unknown): void {
  const message = (err as Error)?.stack ?? String(err);
  if (process.send) send({ type: 'error', message });
  else process.stderr.write(`worker-process: ${message}\n`);
  process.exitCode = 1;
  setTimeout(() => process.exit(1), 100).unref();
}

await redis.ping();
if (process.send) {
  process.on('message', (m: ToWorker) => {
    if (m.type === 'go') go().catch(fail);
    else if (m.type === 'stop') stop(m.graceMs).catch(fail);
  });
  // The parent died or let go: stop quietly.
  process.on('disconnect', () => {
    stop(1_000).then(
      () => process.exit(0),
      () => process.exit(1),
    );
  });
  send({ type: 'ready' });
} else {
  await go();
  for (const signal of ['SIGTERM', 'SIGINT'] as const)
    process.once(signal, () => stop().catch(fail));
}
