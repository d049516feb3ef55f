import type { Command } from 'commander';
import { resolveConfig } from '../../shared/config.ts';
import { ConfigError } from '../../shared/errors.ts';
import { assertRedis } from '../../shared/redis.ts';
import {
  cleanupOpenScopes,
  killAllChildren,
  resolveScenarios,
  runBench,
  SCENARIOS,
} from '../bench/index.ts';

/**
 * `llmq bench [--scenario NAME] [--quick] [--counter tokenizer|differing] [--json FILE]`: runs the benchmarks against the
 * project's mock server and prints one table per scenario. Redis from REDIS_URL.
 */
export function registerBenchCommand(program: Command): void {
  program
    .command('bench')
    .description('benchmarks against the mock server: the published experiment and what llmq adds')
    .option(
      '--scenario <names>',
      `one or more of ${Object.keys(SCENARIOS).join(', ')} (comma-separated; default all)`,
    )
    .option(
      '--quick',
      'windows ÷ 10 (10 s → 1 s) and smaller workloads: about two minutes, for development',
    )
    .option(
      '--counter <name>',
      'how the mock counts input: tokenizer (its own) or differing (characters / 3.6 + 7 a message)',
      'tokenizer',
    )
    .option('--json <file>', 'write every figure as JSON')
    .action(
      async (flags: { scenario?: string; quick?: boolean; json?: string; counter: string }) => {
        const scenarios = resolveScenarios(flags.scenario ? [flags.scenario] : undefined);
        if (flags.counter !== 'tokenizer' && flags.counter !== 'differing')
          throw new ConfigError(
            `--counter must be tokenizer or differing, got ${JSON.stringify(flags.counter)}`,
          );
        const { redisUrl } = resolveConfig({ flags: {}, env: process.env });
        await assertRedis(redisUrl);
        const interrupted = (signal: NodeJS.Signals) => {
          process.stderr.write(
            `bench: ${signal}: stopping worker processes and deleting the run's keys\n`,
          );
          killAllChildren();
          void cleanupOpenScopes(redisUrl).finally(() => process.exit(130));
        };
        process.once('SIGINT', interrupted);
        process.once('SIGTERM', interrupted);
        try {
          await runBench({
            scenarios,
            quick: flags.quick ?? false,
            json: flags.json,
            redisUrl,
            counter: flags.counter,
          });
        } finally {
          process.off('SIGINT', interrupted);
          process.off('SIGTERM', interrupted);
        }
      },
    );
}
