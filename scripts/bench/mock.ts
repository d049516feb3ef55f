import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import type {
  FaultRates,
  MockAnthropicOptions,
  MockStats,
} from '../../testing/mock-anthropic/index.ts';
import { benchChildEntry, trackChild } from './processes.ts';

const ROOT = new URL('../../', import.meta.url).pathname;

/** The project's mock server, run in a process of its own for one scenario. */
export interface BenchMock {
  /** Base URL for the SDK (no `/v1`). */
  readonly url: string;
  /** What the mock saw and charged since it started or was last reset. */
  stats(): Promise<MockStats>;
  /** Clears stats and limit state: the next client starts on an empty window. */
  reset(): Promise<void>;
  /** Replaces its fault rates (absent ones 0): `{ hang: 1 }` makes it silent, `{}` heals it. */
  setFaults(faults: Partial<FaultRates>): Promise<void>;
  close(): Promise<void>;
  /** Kills its process at once (SIGKILL), as a provider going away: connections drop. */
  kill(): Promise<void>;
}

/** Starts the mock (`scripts/bench/mock-process.ts`) and waits for its URL. */
export async function startBenchMock(
  options: MockAnthropicOptions,
  timeoutMs = 30_000,
): Promise<BenchMock> {
  const entry = benchChildEntry('mock-process');
  const child = spawn(process.execPath, [...entry.execArgv, entry.path], {
    cwd: ROOT,
    env: {
      ...process.env,
      LLMQ_BENCH_MOCK: JSON.stringify({ host: '127.0.0.1', port: 0, ...options }),
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  trackChild(child);
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => {
    stderr = (stderr + c.toString()).slice(-4_000);
  });
  const lines = createInterface({ input: child.stdout });
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`the mock did not start within ${timeoutMs} ms: ${stderr.trim()}`)),
      timeoutMs,
    );
    lines.once('line', (line) => {
      clearTimeout(timer);
      resolve(line.trim());
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the mock exited (${code}) before it served: ${stderr.trim()}`));
    });
  }).catch((err: Error) => {
    child.kill('SIGKILL');
    throw err;
  });
  const call = async (method: 'GET' | 'POST', path: string, body?: unknown) => {
    const res = await fetch(`${url}${path}`, {
      method,
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    if (!res.ok) throw new Error(`mock ${method} ${path}: ${res.status} ${await res.text()}`);
    return res;
  };
  let closed: Promise<void> | undefined;
  const gone = () => child.exitCode !== null || child.signalCode !== null;
  return {
    url,
    stats: async () => (await (await call('GET', '/__stats')).json()) as MockStats,
    reset: async () => {
      await call('POST', '/__reset');
    },
    setFaults: async (faults) => {
      await call('POST', '/__faults', faults);
    },
    close() {
      closed ??= (async () => {
        if (gone()) return;
        const exited = once(child, 'exit');
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
        await exited;
        clearTimeout(timer);
      })();
      return closed;
    },
    async kill() {
      if (gone()) return;
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
    },
  };
}

/** Runs `fn` with a mock of its own, closed afterwards whatever happened. */
export async function withMock<T>(
  options: MockAnthropicOptions,
  fn: (mock: BenchMock) => Promise<T>,
): Promise<T> {
  const mock = await startBenchMock(options);
  try {
    return await fn(mock);
  } finally {
    await mock.close();
  }
}
