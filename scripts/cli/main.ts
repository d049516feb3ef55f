import { pathToFileURL } from 'node:url';
import { Command, CommanderError } from 'commander';
import {
  ConfigError,
  CostExceedsLimitError,
  LlmqError,
  RequestValidationError,
} from '../../shared/errors.ts';
import { VERSION } from '../../shared/version.ts';

type Register = (program: Command) => unknown;

/** Every command, in `--help` order, loaded only when needed: a command starts with its own imports. */
const COMMANDS: Readonly<Record<string, () => Promise<Register>>> = {
  worker: async () => (await import('./worker.ts')).registerWorkerCommand,
  enqueue: async () => (await import('./enqueue.ts')).registerEnqueueCommand,
  status: async () => (await import('./status.ts')).registerStatusCommand,
  queues: async () => (await import('./queues.ts')).registerQueuesCommand,
  limits: async () => (await import('./limits.ts')).registerLimitsCommand,
  dlq: async () => (await import('./dlq.ts')).registerDlqCommand,
  'mock-anthropic': async () => (await import('./mock-anthropic.ts')).registerMockAnthropicCommand,
  demo: async () => (await import('./demo.ts')).registerDemoCommand,
  dashboard: async () => (await import('./dashboard.ts')).registerDashboardCommand,
  serve: async () => (await import('./serve.ts')).registerServeCommand,
  batch: async () => (await import('./batch.ts')).registerBatchCommand,
  batches: async () => (await import('./batches.ts')).registerBatchesCommand,
  bench: async () => (await import('./bench.ts')).registerBenchCommand,
};

/**
 * Builds the `llmq` program with the command `argv` names, or every command when it names none
 * it knows (`--help`, a typo). Every command is a thin shell over a library function.
 */
export async function buildProgram(argv: readonly string[]): Promise<Command> {
  const program = new Command('llmq')
    .description(
      'a durable job queue for LLM calls: workers pull only what a shared Redis token budget admits',
    )
    .version(VERSION)
    .exitOverride()
    .showSuggestionAfterError(false)
    .configureOutput({ writeErr: () => {} });
  const named = argv.slice(2).find((a) => !a.startsWith('-'));
  const wanted = named !== undefined && named in COMMANDS ? [named] : Object.keys(COMMANDS);
  for (const name of wanted) (await COMMANDS[name]!())(program);
  return program;
}

/** A file or folder that could not be read or written (a path given on the command line). */
function isFileError(err: unknown): err is NodeJS.ErrnoException & { path: string } {
  const e = err as NodeJS.ErrnoException;
  return (
    e instanceof Error &&
    typeof e.path === 'string' &&
    ['ENOENT', 'EACCES', 'EISDIR', 'ENOTDIR', 'EPERM', 'EEXIST'].includes(e.code ?? '')
  );
}

/** Runs the CLI; resolves with the exit code. Usage errors exit 2, other failures 1. */
export async function main(argv: readonly string[]): Promise<number> {
  const program = await buildProgram(argv);
  try {
    await program.parseAsync([...argv]);
    return typeof process.exitCode === 'number' ? process.exitCode : 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      if (err.exitCode === 0) return 0; // --help, --version
      process.stderr.write(`llmq: ${err.message.replace(/^error: /, '')}\n`);
      return 2;
    }
    if (
      err instanceof ConfigError ||
      err instanceof RequestValidationError ||
      // A request that can never fit the limits is bad input too.
      err instanceof CostExceedsLimitError ||
      err instanceof TypeError
    ) {
      process.stderr.write(`llmq: ${(err as Error).message}\n`);
      return 2;
    }
    // Redis out of memory is one line too (loaded here: --help needs no Redis client).
    const { namedRedisError } = await import('../../shared/redis.ts');
    const url = process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379';
    const named = err instanceof LlmqError ? err : namedRedisError(err, url);
    if (named) {
      process.stderr.write(`llmq: ${named.message}\n`);
      return 1;
    }
    if (isFileError(err)) {
      process.stderr.write(`llmq: ${err.path} cannot be used (${err.message}): check the path\n`);
      return 2;
    }
    process.stderr.write(`llmq: ${(err as Error)?.stack ?? String(err)}\n`);
    return 1;
  }
}

// Run directly from source in development (`npm run llmq:dev -- …`); the bin imports dist/ instead.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = await main(process.argv);
}
