import { Command, CommanderError } from 'commander';
import { registerDashboardCommand } from '../dashboard/index.ts';
import { registerBatchCommand, registerServeCommand } from '../producer/index.ts';
import { ConfigError, LlmqError, RequestValidationError } from '../shared/errors.ts';
import { VERSION } from '../shared/version.ts';
import { registerBenchCommand } from './bench/index.ts';
import { registerDlqCommand } from './commands/dlq.ts';
import { registerEnqueueCommand } from './commands/enqueue.ts';
import { registerQueuesCommand } from './commands/queues.ts';
import { registerStatusCommand } from './commands/status.ts';
import { registerWorkerCommand } from './commands/worker.ts';
import { registerDemoCommand } from './demo.ts';
import { registerMockAnthropicCommand } from './mock-anthropic/index.ts';

/** Builds the `llmq` program. Every command is a thin shell over a library function. */
export function buildProgram(): Command {
  const program = new Command('llmq')
    .description(
      'a durable job queue for LLM calls: workers pull only what a shared Redis token budget admits',
    )
    .version(VERSION)
    .exitOverride()
    .showSuggestionAfterError(false)
    .configureOutput({ writeErr: () => {} });
  registerWorkerCommand(program);
  registerEnqueueCommand(program);
  registerStatusCommand(program);
  registerQueuesCommand(program);
  registerDlqCommand(program);
  registerMockAnthropicCommand(program);
  registerDemoCommand(program);
  registerDashboardCommand(program);
  registerServeCommand(program);
  registerBatchCommand(program);
  registerBenchCommand(program);
  return program;
}

/** Runs the CLI; resolves with the exit code. Usage errors exit 2, other failures 1. */
export async function main(argv: readonly string[]): Promise<number> {
  const program = buildProgram();
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
      err instanceof TypeError
    ) {
      process.stderr.write(`llmq: ${(err as Error).message}\n`);
      return 2;
    }
    if (err instanceof LlmqError) {
      process.stderr.write(`llmq: ${err.message}\n`);
      return 1;
    }
    process.stderr.write(`llmq: ${(err as Error)?.stack ?? String(err)}\n`);
    return 1;
  }
}
