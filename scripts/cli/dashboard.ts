/**
 * `llmq dashboard`: serves Bull Board, the limiter's page and `/metrics` in the foreground. The
 * URL goes alone on the first line of stdout (carrying `?token=` when the token was generated),
 * a one-line summary on the second; SIGINT or SIGTERM closes the server and the command returns.
 */

import type { Command } from 'commander';
import { type DashboardFlags, resolveDashboardOptions } from '../../dashboard/options.ts';
import { startDashboard } from '../../dashboard/server.ts';
import { ConfigError } from '../../shared/errors.ts';
import { assertRedis } from '../../shared/redis.ts';
import { untilStopSignal } from '../../shared/signals.ts';

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
    .option('--config <file>', 'JSON config file (env LLMQ_CONFIG)')
    .action(async (_flags: DashboardFlags, command: Command) => {
      const flags = command.optsWithGlobals();
      // The config file reaches resolveConfig the way LLMQ_CONFIG does.
      const file = typeof flags['config'] === 'string' ? flags['config'] : undefined;
      const options = resolveDashboardOptions({
        flags,
        env: file ? { ...process.env, LLMQ_CONFIG: file } : process.env,
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
          `prefix ${options.prefix}; jobs (Bull Board) at ${dashboard.baseUrl}/; limiter at ${dashboard.baseUrl}/limiter; ` +
          `metrics at ${dashboard.baseUrl}/metrics; ` +
          `access: ${access}${options.readOnly ? '; read-only' : ''}\n`,
      );
      await untilStopSignal();
      await dashboard.close();
    });
}
