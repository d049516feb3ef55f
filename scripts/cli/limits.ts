import type { Command } from 'commander';
import { ConfigError } from '../../shared/errors.ts';
import {
  clearFleetLimits,
  describeLimits,
  describeWriter,
  fleetLimitsOf,
  hasLimits,
  readFleetLimits,
  writeFleetLimits,
} from '../../shared/fleet-limits.ts';
import { configFrom, namesOf, queueOptions, withRedis } from './common.ts';

/** `llmq limits show`'s lines: the configured limits, and where the read ones will go. */
async function show(flags: Record<string, unknown>): Promise<void> {
  const config = configFrom(flags);
  const names = namesOf(config);
  await withRedis(config, async (redis) => {
    const stored = await readFleetLimits(redis, names);
    if (flags['json']) {
      const out = { queue: names.queue, prefix: names.prefix, configured: stored ?? null };
      process.stdout.write(`${JSON.stringify(out)}\n`);
      return;
    }
    if (!stored) {
      process.stdout.write(
        `no limits stored for queue ${names.queue} (prefix ${names.prefix}): ` +
          'a worker stores its own when it starts, or `llmq limits set --tpm N …`\n',
      );
      return;
    }
    process.stdout.write(
      `queue ${names.queue} (prefix ${names.prefix}): ${describeLimits(stored.limits)}\n` +
        `  set by ${stored.setBy} at ${new Date(stored.setAt).toISOString()}\n`,
    );
  });
}

const LIMIT_FLAGS: [string, string][] = [
  ['--rpm <n>', 'requests per window (env LLMQ_RPM)'],
  ['--tpm <n>', 'input + output tokens per window (env LLMQ_TPM)'],
  ['--itpm <n>', 'input tokens per window (env LLMQ_ITPM)'],
  ['--otpm <n>', 'output tokens per window (env LLMQ_OTPM)'],
  ['--window <seconds>', "the provider's window (env LLMQ_WINDOW_S, default 60)"],
  ['--max-in-flight <n>', 'calls in flight across every worker (env LLMQ_MAX_IN_FLIGHT)'],
  ['--headroom <share>', 'share of each limit left unused (env LLMQ_HEADROOM, default 0)'],
];

/** Adds `llmq limits [show|set|clear]`: the fleet's configured limits of a queue. */
export function registerLimitsCommand(program: Command): Command {
  const limits = program
    .command('limits')
    .description(
      "the fleet's configured limits of a queue, in Redis: written by workers when they start " +
        '(and by `limits set`), read by producers, `enqueue`, `serve` and `batch summarize`',
    );
  queueOptions(
    limits
      .command('show', { isDefault: true })
      .description('print the stored limits (the default)')
      .option('--json', 'print one JSON object'),
  ).action(show);

  const set = limits
    .command('set')
    .description(
      'replace the stored limits with these (scopes and models from --config, LLMQ_SCOPES, LLMQ_MODELS); workers running keep theirs until they restart',
    );
  for (const [flag, help] of LIMIT_FLAGS) set.option(flag, help);
  queueOptions(set).action(async (flags: Record<string, unknown>) => {
    const config = configFrom(flags);
    const fleet = fleetLimitsOf(config);
    if (!hasLimits(fleet)) {
      throw new ConfigError(
        'llmq limits set needs at least one limit (--rpm, --tpm, --itpm, --otpm, --max-in-flight, or scopes or models in --config): `llmq limits clear` removes them',
      );
    }
    await withRedis(config, async (redis) => {
      await writeFleetLimits(redis, namesOf(config), fleet, describeWriter('llmq limits set'));
    });
    process.stdout.write(
      `stored for queue ${config.queue}: ${describeLimits(fleet)} ` +
        '(workers running keep their limits until they restart; start them without limit flags, or with these)\n',
    );
  });

  queueOptions(
    limits.command('clear').description('remove the stored limits (workers store theirs again)'),
  ).action(async (flags: Record<string, unknown>) => {
    const config = configFrom(flags);
    const had = await withRedis(config, (redis) => clearFleetLimits(redis, namesOf(config)));
    process.stdout.write(
      had
        ? `removed the limits of queue ${config.queue}\n`
        : `no limits were stored for queue ${config.queue}\n`,
    );
  });
  return limits;
}
