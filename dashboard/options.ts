/** The dashboard's options from flags and environment (`llmq dashboard` hands over its flags). */
import { z } from 'zod';
import { resolveConfig } from '../shared/config.ts';
import { ConfigError } from '../shared/errors.ts';
import { heldBoundsOf } from '../shared/held.ts';
import { dashboardAuthFromEnv } from './auth.ts';
import type { DashboardOptions } from './server.ts';

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
    maxDepthBytes: config.maxDepthBytes,
    heldBounds: heldBoundsOf(config),
    budgets: config.budgets,
    metricsTenants: config.metricsTenants,
    queue: typeof flags['queue'] === 'string' ? flags['queue'] : env['LLMQ_QUEUE'] || undefined,
    authThrottle: { log: (line) => process.stderr.write(`llmq dashboard: ${line}\n`) },
  };
}
