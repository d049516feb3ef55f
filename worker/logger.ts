/**
 * Where the worker reports what it does; the CLI prints these, tests collect them.
 * @inline
 */
export interface WorkerLogger {
  /** What it did: a job started, finished, retried. */
  info(message: string, fields?: Record<string, unknown>): void;
  /** What went wrong: a provider error, a lost connection. */
  warn(message: string, fields?: Record<string, unknown>): void;
}

/** The logger of a worker given none. */
export const silentLogger: WorkerLogger = { info() {}, warn() {} };
