import Anthropic from '@anthropic-ai/sdk';
import { Producer } from '../../producer/producer.ts';
import type { QueueNames } from '../../shared/keys.ts';
import type { OutputAccounting } from '../../shared/limiter/types.ts';
import type { RedisClient } from '../../shared/redis.ts';
import type { InputCounting } from '../../testing/mock-anthropic/index.ts';
import { startWorker, type WorkerHandle, type WorkerOptions } from '../../worker/worker.ts';
import type { ClientRun } from './clients/run-baseline.ts';
import { type LimiterWatchReport, watchLimiter } from './limiter-watch.ts';
import { startWorkers, type WorkerChild } from './processes.ts';
import { benchProviderClient } from './provider-client.ts';
import { CallRecorder, mergeReports, type RecorderReport } from './recorder.ts';
import { benchRedis, withBenchScope } from './redis-scope.ts';
import type { WorkerProcessReport } from './worker-protocol.ts';

export interface LlmqRunOptions {
  readonly redisUrl: string;
  /** Label of the run's Redis scope: a queue and key prefix of its own, deleted after. */
  readonly scope: string;
  readonly mockUrl: string;
  /** Messages requests (the bench's own, or any the API takes). */
  readonly requests: readonly object[];
  readonly limiter: WorkerOptions['limiter'];
  /** Worker pools: `in-process` shares this process; `processes` forks `worker-process.ts`. */
  readonly workers: { readonly count: number; readonly where: 'in-process' | 'processes' };
  /** Calls each worker runs at once. */
  readonly concurrency: number;
  /** Calls in flight across every worker (the limiter's semaphore). @default no cap */
  readonly maxInFlight?: number | undefined;
  /** @default true */
  readonly feedback?: boolean;
  /** Count input tokens with the mock's count_tokens at enqueue (`exactCount`). @default false */
  readonly exactCount?: boolean;
  /** Read output tokens from each response (for `actual` and `produced`). @default false */
  readonly recordOutput?: boolean;
  /** Give up waiting for results after this long. @default 600_000 */
  readonly timeoutMs?: number;
  /** Sample the limiter's foreign spend and estimate accuracy while it runs. @default false */
  readonly watchLimiter?: boolean;
  /** How the mock counts input, for the recorders. @default the mock's tokenizer */
  readonly counting?: InputCounting | undefined;
}

export interface LlmqRun extends ClientRun {
  readonly calls: RecorderReport;
  /** One per worker process (only with `where: 'processes'`). */
  readonly processes: readonly WorkerProcessReport[];
  /** With `watchLimiter`. */
  readonly limiterWatch?: LimiterWatchReport | undefined;
}

/** The rate scenarios' budget: `limit` tokens per sliding window, `maxInFlight` calls at once. */
export function tokenBudget(
  windowMs: number,
  limit: number,
  maxInFlight: number,
  outputAccounting: OutputAccounting = 'reserve',
): Pick<LlmqRunOptions, 'limiter' | 'maxInFlight'> {
  return { limiter: { windowMs, limits: { tokens: limit }, outputAccounting }, maxInFlight };
}

/**
 * llmq end to end, in a Redis scope of its own (`withBenchScope`): workers started first and
 * idle (as a deployed pool would be), then the producer enqueues every request in one
 * `enqueueMany`, and the run lasts until the last job has completed (its `completedAt`) or been
 * dead-lettered.
 */
export function runLlmq(options: LlmqRunOptions): Promise<LlmqRun> {
  return withBenchScope(options.redisUrl, options.scope, (redis, names) =>
    runInScope(options, redis, names),
  );
}

async function runInScope(
  options: LlmqRunOptions,
  redis: RedisClient,
  names: QueueNames,
): Promise<LlmqRun> {
  const { limiter } = options;
  const record = {
    mode: 'full',
    output: options.recordOutput ?? false,
    counting: options.counting,
  } as const;
  const recorders: CallRecorder[] = [];
  const handles: WorkerHandle[] = [];
  const connections: RedisClient[] = [];
  let children: WorkerChild[] = [];
  const producer = new Producer({
    redis,
    names,
    limits: limiter.limits ?? {},
    headroom: limiter.headroom ?? 0.01,
    ...(options.exactCount
      ? { tokenCounter: new Anthropic({ apiKey: 'bench-key', baseURL: options.mockUrl }) }
      : {}),
  });
  try {
    if (options.workers.where === 'in-process') {
      for (let i = 0; i < options.workers.count; i++) {
        const recorder = new CallRecorder(record);
        const connection = benchRedis(options.redisUrl);
        recorders.push(recorder);
        connections.push(connection);
        handles.push(
          await startWorker({
            redis: connection,
            names,
            client: benchProviderClient(options.mockUrl, recorder),
            limiter,
            concurrency: options.concurrency,
            maxInFlight: options.maxInFlight,
            feedback: options.feedback ?? true,
            stream: 'always',
          }),
        );
      }
    } else {
      children = await startWorkers(options.workers.count, () => ({
        mode: 'llmq',
        redisUrl: options.redisUrl,
        names,
        mockUrl: options.mockUrl,
        concurrency: options.concurrency,
        maxInFlight: options.maxInFlight,
        limiter,
        feedback: options.feedback ?? true,
        record: record.mode,
        recordOutput: record.output,
        ...(options.counting ? { counting: options.counting } : {}),
      }));
      for (const c of children) c.go();
    }

    const watch = options.watchLimiter ? watchLimiter(redis, names) : undefined;
    const t0 = Date.now();
    const ids = await producer.enqueueMany(options.requests, {
      exactCount: options.exactCount ?? false,
    });
    let completed = 0;
    let failed = 0;
    let last = t0;
    const errors: Record<string, number> = {};
    await Promise.all(
      ids.map((id) =>
        producer.waitForResult(id, { timeout: options.timeoutMs ?? 600_000 }).then(
          (result) => {
            completed++;
            last = Math.max(last, result.completedAt);
          },
          (err: Error) => {
            failed++;
            last = Math.max(last, Date.now());
            const key = `${err.constructor.name}: ${err.message.slice(0, 120)}`;
            errors[key] = (errors[key] ?? 0) + 1;
          },
        ),
      ),
    );
    const wallMs = last - t0;
    const limiterWatch = await watch?.stop();
    await Promise.all(handles.map((h) => h.stop(5_000)));
    handles.length = 0;
    const processes = await Promise.all(children.map((c) => c.stop()));
    children = [];
    const calls = mergeReports([
      ...(await Promise.all(recorders.map((r) => r.report()))),
      ...processes.map((p) => p.calls),
    ]);
    return { completed, failed, wallMs, errors, calls, processes, limiterWatch };
  } finally {
    await Promise.all(handles.map((h) => h.stop(1_000).catch(() => {})));
    for (const c of children) c.kill();
    await producer.close().catch(() => {});
    await Promise.all(connections.map((c) => c.quit().catch(() => c.disconnect())));
  }
}
