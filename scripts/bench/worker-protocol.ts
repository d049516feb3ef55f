import type { DeploymentConfig } from '../../shared/deployments.ts';
import type { QueueNames } from '../../shared/keys.ts';
import type { InputCounting } from '../../testing/mock-anthropic/index.ts';
import type { WorkerOptions } from '../../worker/worker.ts';
import type { CommandCounts } from './command-counter.ts';
import type { RecorderReport } from './recorder.ts';

/**
 * What a bench worker process runs (`scripts/bench/worker-process.ts`), given as JSON in the
 * `LLMQ_BENCH_WORKER` environment variable or as the first argument.
 */
export interface WorkerProcessConfig {
  /**
   * `llmq`: llmq's worker (`startWorker`) calling the mock; `llmq-instant`: the same worker with
   * a zero-latency in-process provider (`instant-provider.ts`); `bare`: a BullMQ Worker with a
   * no-op processor; `bare-call`: a BullMQ Worker whose processor makes the same provider call
   * llmq makes (streamed, through the SDK), with no gate.
   */
  readonly mode: 'llmq' | 'llmq-instant' | 'bare' | 'bare-script' | 'bare-call';
  readonly redisUrl: string;
  readonly names: QueueNames;
  /** The mock's URL (for `llmq` and `bare-call`). */
  readonly mockUrl?: string;
  /** Jobs this process runs at once. */
  readonly concurrency: number;
  /**
   * A pool of deployments instead of `mockUrl` (`llmq` mode): each through its platform's SDK,
   * as `llmq worker` builds them from the config; credentials from `env`.
   */
  readonly deployments?: readonly DeploymentConfig[];
  /** Environment variables the deployments' credentials name (fake ones, for the mock). */
  readonly env?: Readonly<Record<string, string>>;
  /** The breakers' settings (`llmq` mode). @default the worker's */
  readonly breaker?: WorkerOptions['breaker'];
  /** llmq's limiter settings (`llmq` mode). */
  readonly limiter?: WorkerOptions['limiter'];
  /** Fair share between tenants (`llmq` mode). @default off */
  readonly fairShare?: WorkerOptions['fairShare'];
  /** Calls in flight across every worker (`llmq` mode). @default no cap */
  readonly maxInFlight?: number | undefined;
  /** The wait for a call's first byte (`llmq` mode). @default the worker's (20 s) */
  readonly firstByteTimeoutMs?: number | undefined;
  /** Feed the provider's headers to the limiter (`llmq` mode). @default true */
  readonly feedback?: boolean;
  /** What the call recorder keeps. @default 'counts' */
  readonly record?: 'counts' | 'full';
  /** Read each response's output tokens (for `actual` accounting). @default false */
  readonly recordOutput?: boolean;
  /** How the mock counts input, for the recorder. @default the mock's tokenizer */
  readonly counting?: InputCounting;
  /** Count the Redis commands this process sends while it works. @default false */
  readonly countCommands?: boolean;
  /** The no-op processor (`bare`) and the in-process provider (`llmq-instant`) take this long, ms. @default 0 */
  readonly providerDelayMs?: number;
  /** Node.js options for the process (`--max-old-space-size=128`, say). @default none */
  readonly nodeOptions?: readonly string[];
}

/** Parent to child. */
export type ToWorker =
  | { readonly type: 'go' }
  | { readonly type: 'stop'; readonly graceMs?: number };

/** What a worker process reports when it stops. */
export interface WorkerProcessReport {
  readonly pid: number;
  readonly calls: RecorderReport;
  /** Largest RSS sampled every 100 ms while it worked, bytes. */
  readonly peakRssBytes: number;
  /** RSS once connected and idle, before any work (the runtime and its modules), bytes. */
  readonly idleRssBytes: number;
  /** Heap used once connected and idle, after a full GC, bytes. */
  readonly idleHeapBytes: number;
  /** Largest heap used sampled while it worked, bytes. */
  readonly peakHeapBytes: number;
  /** CPU time while it worked, ms (user + system). */
  readonly cpuMs: number;
  /** Whether it ran llmq compiled (dist/) rather than its TypeScript through tsx. */
  readonly compiled: boolean;
  /** Redis commands sent while it worked (with `countCommands`). */
  readonly redis?: CommandCounts | undefined;
}

/** Child to parent. */
export type FromWorker =
  | { readonly type: 'ready' }
  | { readonly type: 'report'; readonly report: WorkerProcessReport }
  | { readonly type: 'error'; readonly message: string };
