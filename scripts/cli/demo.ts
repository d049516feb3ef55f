import type { Command } from 'commander';
import { runDemo } from '../demo.ts';
import { invokedAs } from './common.ts';

/** `llmq demo`: summarizes the bundled samples end to end; exits 1 when any was dead-lettered. */
export function registerDemoCommand(program: Command): void {
  program
    .command('demo')
    .description(
      'summarize the bundled sample documents end to end (mock provider without ANTHROPIC_API_KEY)',
    )
    .action(async () => {
      const report = await runDemo(process.env, console.log, invokedAs(process.argv[1]));
      if (report.dead > 0) process.exitCode = 1;
    });
}
