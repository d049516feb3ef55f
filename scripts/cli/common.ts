import { basename, isAbsolute, relative, sep } from 'node:path';
import type { Command } from 'commander';
import { type Config, resolveConfig } from '../../shared/config.ts';
import { durationMs } from '../../shared/duration.ts';
import { ConfigError } from '../../shared/errors.ts';
import type { QueueNames } from '../../shared/keys.ts';
import type { RedisClient } from '../../shared/redis.ts';
import { assertRedis, connectRedis } from '../../shared/redis.ts';

/** Adds the options every command that touches a queue takes. */
export function queueOptions(cmd: Command): Command {
  return cmd
    .option('--queue <name>', 'queue name (env LLMQ_QUEUE)', undefined)
    .option('--prefix <prefix>', 'Redis key prefix (env LLMQ_PREFIX)', undefined)
    .option('--config <file>', 'JSON config file (env LLMQ_CONFIG)', undefined);
}

/** Resolves the config from a command's flags, the environment and the config file. */
export function configFrom(flags: Record<string, unknown>): Config {
  const file = typeof flags['config'] === 'string' ? flags['config'] : undefined;
  return resolveConfig({ flags, env: process.env, ...(file ? { file } : {}) });
}

export const namesOf = (c: Config): QueueNames => ({ prefix: c.prefix, queue: c.queue });

/**
 * Checks that Redis answers (one clear line when it does not), then runs `fn` with a
 * connection that is closed afterwards.
 */
export async function withRedis<T>(
  config: Config,
  fn: (redis: RedisClient) => Promise<T>,
): Promise<T> {
  await assertRedis(config.redisUrl);
  const redis = connectRedis(config.redisUrl);
  redis.on('error', () => {});
  try {
    return await fn(redis);
  } finally {
    await redis.quit().catch(() => redis.disconnect());
  }
}

/** Parses a duration such as `90s`, `15m`, `12h`, `7d` or a bare number of seconds, to ms. */
export function parseDuration(text: string, flag: string): number {
  const t = text.trim();
  const ms = /^\d+(?:\.\d+)?$/.test(t) ? Math.round(Number(t) * 1_000) : durationMs(t);
  if (ms === undefined) {
    throw new ConfigError(
      `${flag} must be a duration such as 90s, 15m, 12h or 7d, got ${JSON.stringify(text)}`,
    );
  }
  return ms;
}

/**
 * How the person who started this process runs llmq, for commands a command suggests:
 * `node scripts/llmq.mjs` in a clone, `npx llmq` from a project's node_modules, else `llmq`.
 */
export function invokedAs(script: string | undefined, cwd = process.cwd()): string {
  if (!script) return 'llmq';
  if (basename(script) === 'llmq')
    return script.includes(`node_modules${sep}.bin`) ? 'npx llmq' : 'llmq';
  const inHere = relative(cwd, script);
  if (basename(script) === 'llmq.mjs' && !inHere.startsWith('..') && !isAbsolute(inHere))
    return `node ${inHere}`;
  return 'llmq';
}
