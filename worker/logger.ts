/** Where the worker reports what it does; the CLI prints these, tests collect them. */
export interface WorkerLogger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
}

/** The logger of a worker given none. */
export const silentLogger: WorkerLogger = { info() {}, warn() {} };
