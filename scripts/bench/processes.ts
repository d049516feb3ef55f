import { type ChildProcess, fork } from 'node:child_process';
import type {
  FromWorker,
  ToWorker,
  WorkerProcessConfig,
  WorkerProcessReport,
} from './worker-protocol.ts';

const ROOT = new URL('../../', import.meta.url).pathname;

/**
 * How to run a module of this folder in a child process: its compiled `.js` when the bench itself
 * runs compiled (dist/, as `llmq bench` does after `npm run build`), else its `.ts` through tsx.
 */
export function benchChildEntry(name: string): { path: string; execArgv: string[] } {
  const compiled = import.meta.url.endsWith('.js');
  return {
    path: new URL(`./${name}.${compiled ? 'js' : 'ts'}`, import.meta.url).pathname,
    execArgv: compiled ? [] : ['--import', 'tsx'],
  };
}

/** Every child still alive; all are killed when this process exits, whatever the reason. */
const alive = new Set<ChildProcess>();
let hooked = false;

function hookExit(): void {
  if (hooked) return;
  hooked = true;
  process.once('exit', killAllChildren);
}

/** Kills this child with the others if the bench exits before it is done with it. */
export function trackChild(child: ChildProcess): void {
  hookExit();
  alive.add(child);
  child.once('exit', () => alive.delete(child));
}

/** Kills every bench child still running (SIGKILL; each by its own pid). */
export function killAllChildren(): void {
  for (const child of alive) {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
  alive.clear();
}

/**
 * A worker process of the bench (`worker-process`, compiled or through tsx, with an IPC channel). It
 * connects and reports ready, pulls jobs after {@link go}, and reports on {@link stop}.
 */
export class WorkerChild {
  private readonly child: ChildProcess;
  private stderrTail = '';
  private readonly exited: Promise<number | null>;
  private report: Promise<WorkerProcessReport>;

  private constructor(config: WorkerProcessConfig) {
    hookExit();
    const entry = benchChildEntry('worker-process');
    this.child = fork(entry.path, [], {
      cwd: ROOT,
      // LLMQ_BENCH_CPU_PROF=DIR writes a V8 CPU profile of every worker process into DIR.
      execArgv: [
        ...entry.execArgv,
        ...(config.nodeOptions ?? []),
        ...(process.env['LLMQ_BENCH_CPU_PROF']
          ? ['--cpu-prof', `--cpu-prof-dir=${process.env['LLMQ_BENCH_CPU_PROF']}`]
          : []),
      ],
      env: { ...process.env, LLMQ_BENCH_WORKER: JSON.stringify(config) },
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    });
    alive.add(this.child);
    this.child.stderr?.on('data', (chunk: Buffer) => {
      this.stderrTail = (this.stderrTail + chunk.toString()).slice(-4_000);
    });
    this.exited = new Promise((resolve) => {
      this.child.once('exit', (code) => {
        alive.delete(this.child);
        resolve(code);
      });
    });
    this.report = new Promise<WorkerProcessReport>((resolve, reject) => {
      this.child.on('message', (m: FromWorker) => {
        if (m.type === 'report') resolve(m.report);
        if (m.type === 'error')
          reject(new Error(`bench worker ${this.child.pid} failed: ${m.message}`));
      });
      void this.exited.then((code) =>
        reject(
          new Error(
            `bench worker ${this.child.pid} exited (${code}) before reporting: ${this.stderrTail.trim()}`,
          ),
        ),
      );
    });
    this.report.catch(() => {});
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /** Starts a worker process; resolves once it is connected and waiting for {@link go}. */
  static async start(config: WorkerProcessConfig, timeoutMs = 60_000): Promise<WorkerChild> {
    const w = new WorkerChild(config);
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(
          () =>
            reject(
              new Error(`bench worker not ready within ${timeoutMs} ms: ${w.stderrTail.trim()}`),
            ),
          timeoutMs,
        );
        w.child.on('message', (m: FromWorker) => {
          if (m.type === 'ready') {
            clearTimeout(timer);
            resolve();
          }
        });
        w.report.catch((err: Error) => {
          clearTimeout(timer);
          reject(err);
        });
      });
    } catch (err) {
      w.kill();
      throw err;
    }
    return w;
  }

  go(): void {
    this.child.send({ type: 'go' } satisfies ToWorker);
  }

  /** Asks the worker to stop and report; kills it if it has not within `timeoutMs`. */
  async stop(graceMs = 5_000, timeoutMs = 30_000): Promise<WorkerProcessReport> {
    if (this.child.connected) this.child.send({ type: 'stop', graceMs } satisfies ToWorker);
    const timer = setTimeout(() => this.kill(), timeoutMs);
    try {
      const report = await this.report;
      await this.exited;
      return report;
    } finally {
      clearTimeout(timer);
    }
  }

  kill(): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
  }
}

/** Starts `n` worker processes at once; if one fails, the others are killed. */
export async function startWorkers(
  n: number,
  config: (i: number) => WorkerProcessConfig,
): Promise<WorkerChild[]> {
  const started = await Promise.allSettled(
    Array.from({ length: n }, (_, i) => WorkerChild.start(config(i))),
  );
  const failed = started.find((s) => s.status === 'rejected');
  if (failed) {
    for (const s of started) if (s.status === 'fulfilled') s.value.kill();
    throw (failed as PromiseRejectedResult).reason;
  }
  return started.map((s) => (s as PromiseFulfilledResult<WorkerChild>).value);
}
