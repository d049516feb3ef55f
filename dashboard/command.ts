/**
 * `llmq dashboard`: serves Bull Board, the limiter's page and `/metrics` in the foreground. The
 * URL goes alone on the first line of stdout (carrying `?token=` when the token was generated),
 * a one-line summary on the second; SIGINT or SIGTERM closes the server and the command returns.
 */

import type { Command } from 'commander';
import { z } from 'zod';
import { resolveConfig } from '../shared/config.ts';
import { ConfigError } from '../shared/errors.ts';
import { assertRedis } from '../shared/redis.ts';
import { untilStopSignal } from '../shared/signals.ts';
import { dashboardAuthFromEnv } from './auth.ts';
import { type DashboardOptions, startDashboard } from './server.ts';

/** The command's own flags as commander hands them over. */
export interface DashboardFlags {
  port?: string;
  host?: string;
  readOnly?: boolean;
  prefix?: string;
}

const port = z.coerce.number().refine((n) => Number.isInteger(n) && n >= 0 && n <= 65_535);
const host = z.string().regex(/^[A-Za-z0-9.:_-]{1,253}$/);
const yes = /^(1|true|yes|on)$/i;

/**
 * Resolves the dashboard's options from its flags, the global ones and the environment
 * (flag > env > default), with the queue settings from `resolveConfig`.
 *
 * @throws ConfigError naming the flag or variable and the bad value.
 */
export function resolveDashboardOptions(sources: {
  readonly flags?: DashboardFlags & Record<string, unknown>;
  readonly env?: Record<string, string | undefined>;
}): DashboardOptions {
  const flags = sources.flags ?? {};
  const env = sources.env ?? {};
  const config = resolveConfig({ flags, env });
  const pick = (flag: string | undefined, name: string, variable: string) =>
    flag !== undefined
      ? { raw: flag, from: `--${name}` }
      : env[variable]
        ? { raw: env[variable]!, from: variable }
        : undefined;
  const portIn = pick(flags.port, 'port', 'LLMQ_DASHBOARD_PORT');
  const hostIn = pick(flags.host, 'host', 'LLMQ_DASHBOARD_HOST');
  let chosenPort = 3000;
  if (portIn) {
    const parsed = port.safeParse(portIn.raw.trim() === '' ? Number.NaN : portIn.raw);
    if (!parsed.success) {
      throw new ConfigError(
        `${portIn.from} must be a whole number from 0 to 65535, got ${JSON.stringify(portIn.raw)}`,
      );
    }
    chosenPort = parsed.data;
  }
  if (hostIn && !host.safeParse(hostIn.raw).success) {
    throw new ConfigError(
      `${hostIn.from} must be a host name or IP address, got ${JSON.stringify(hostIn.raw)}`,
    );
  }
  return {
    redisUrl: config.redisUrl,
    prefix: config.prefix,
    host: hostIn?.raw ?? '127.0.0.1',
    port: chosenPort,
    readOnly: flags.readOnly === true || yes.test(env['LLMQ_DASHBOARD_READ_ONLY'] ?? ''),
    auth: dashboardAuthFromEnv(env),
    maxDepth: config.maxDepth,
    windowMarginMs: config.windowMarginMs,
    queue: typeof flags['queue'] === 'string' ? flags['queue'] : env['LLMQ_QUEUE'] || undefined,
    authThrottle: { log: (line) => process.stderr.write(`llmq dashboard: ${line}\n`) },
  };
}

/** Adds the `dashboard` subcommand to `program`. */
export function registerDashboardCommand(program: Command): void {
  program
    .command('dashboard')
    .description(
      "Serve Bull Board for every queue (and its dead letters), the limiter's live page and /metrics " +
        'until SIGINT/SIGTERM. Access: LLMQ_DASHBOARD_USER + LLMQ_DASHBOARD_PASSWORD (Basic), ' +
        'LLMQ_DASHBOARD_TOKEN (bearer), or else a one-time token in the printed URL',
    )
    .option(
      '--port <n>',
      'port to listen on; 0 picks a free one (env LLMQ_DASHBOARD_PORT)',
      undefined,
    )
    .option('--host <host>', 'interface to bind (env LLMQ_DASHBOARD_HOST)', undefined)
    .option(
      '--read-only',
      'hide and refuse retry, promote, clean and every other action (env LLMQ_DASHBOARD_READ_ONLY=1)',
    )
    .option('--prefix <prefix>', 'prefix of the Redis keys (env LLMQ_PREFIX)')
    .option(
      '--queue <name>',
      'the queue the limiter page opens on (env LLMQ_QUEUE; default the busiest)',
    )
    .action(async (_flags: DashboardFlags, command: Command) => {
      const options = resolveDashboardOptions({
        flags: command.optsWithGlobals(),
        env: process.env,
      });
      await assertRedis(options.redisUrl!);
      let dashboard: Awaited<ReturnType<typeof startDashboard>>;
      try {
        dashboard = await startDashboard(options);
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        if (code === 'EADDRINUSE' || code === 'EACCES' || code === 'EADDRNOTAVAIL') {
          throw new ConfigError(
            `--host ${options.host} --port ${options.port} cannot be used (${code}): pick another port, or --port 0 for a free one`,
            { cause: error },
          );
        }
        throw error;
      }
      const access = options.auth?.user
        ? 'Basic auth'
        : dashboard.token && !dashboard.url.includes('token=')
          ? 'bearer token from LLMQ_DASHBOARD_TOKEN'
          : 'one-time token (in the URL above; Prometheus: Authorization: Bearer <token>)';
      process.stdout.write(
        `${dashboard.url}\n` +
          `prefix ${options.prefix}; limiter at ${dashboard.baseUrl}/limiter; metrics at ${dashboard.baseUrl}/metrics; ` +
          `access: ${access}${options.readOnly ? '; read-only' : ''}\n`,
      );
      await untilStopSignal();
      await dashboard.close();
    });
}
