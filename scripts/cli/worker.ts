import { type Command, Option } from 'commander';
import type { Config } from '../../shared/config.ts';
import { budgetSettingsOf, fairShareOf } from '../../shared/config-views.ts';
import { ConfigError } from '../../shared/errors.ts';
import {
  describeLimits,
  describeWriter,
  type FleetLimits,
  fleetLimitsOf,
  limitSetOf,
  type SettledLimits,
  settleWorkerLimits,
} from '../../shared/fleet-limits.ts';
import { keptBoundsOf } from '../../shared/held.ts';
import { assertRedis, connectRedis, type RedisClient } from '../../shared/redis.ts';
import { createLogger, workerLogger } from '../../shared/telemetry/logger.ts';
import { startTracing } from '../../shared/telemetry/sdk.ts';
import { errorEventLog } from '../../shared/telemetry/throttled-warning.ts';
import { createPoolEntries } from '../../worker/deployment-clients.ts';
import { startHealthServer } from '../../worker/health-server.ts';
import { createProviderClient } from '../../worker/provider.ts';
import { startWorker } from '../../worker/worker.ts';
import type { WorkerOptions } from '../../worker/worker-options.ts';
import { configFrom, namesOf, queueOptions } from './common.ts';

/**
 * The limits a starting worker runs with: its own, stored as the fleet's when none are (or
 * with `replace`), or the stored ones when it has none; a worker whose own differ from the
 * stored ones does not start (FleetLimitsConflictError, one line).
 */
async function fleetLimitsFor(
  redis: RedisClient,
  config: Config,
  replace: boolean,
): Promise<{ fleet: FleetLimits; action: SettledLimits['action'] }> {
  try {
    const settled = await settleWorkerLimits({
      redis,
      names: namesOf(config),
      own: fleetLimitsOf(config),
      replace,
      setBy: describeWriter('worker'),
    });
    return { fleet: settled.limits ?? fleetLimitsOf(config), action: settled.action };
  } catch (err) {
    redis.disconnect();
    throw err;
  }
}

/** `--health-port`: a port number, or undefined when the probes are not asked for. */
function healthPortOf(raw: unknown): number | undefined {
  if (raw === undefined) return undefined;
  const port = Number(raw);
  if (
    typeof raw === 'string' &&
    raw.trim() !== '' &&
    Number.isInteger(port) &&
    port >= 0 &&
    port <= 65_535
  )
    return port;
  throw new ConfigError(
    `--health-port must be a whole number from 0 to 65535, got ${JSON.stringify(raw)}`,
  );
}

/** The worker's options from the resolved config and the fleet's limits. */
function workerOptionsOf(
  redis: RedisClient,
  config: Config,
  fleet: FleetLimits,
  deployments: Awaited<ReturnType<typeof createPoolEntries>> | undefined,
  flags: Record<string, unknown>,
): Omit<WorkerOptions, 'logger'> {
  const set = limitSetOf(fleet);
  return {
    redis,
    names: namesOf(config),
    ...(deployments
      ? { deployments }
      : {
          client: createProviderClient({
            apiKey: config.anthropicApiKey ?? '',
            baseURL: config.anthropicBaseUrl,
          }),
        }),
    limiter: {
      windowMs: fleet.windowS * 1000,
      limits: set.limits,
      scopes: set.scopes,
      headroom: fleet.headroom,
      outputAccounting: config.outputAccounting,
    },
    concurrency: config.concurrency,
    retryForMs: config.retryForMs,
    ...keptBoundsOf(config),
    firstByteTimeoutMs: config.firstByteTimeoutMs,
    idleTimeoutMs: config.idleTimeoutMs,
    lockDurationMs: config.recoverAfterMs,
    stalledIntervalMs: Math.round(config.recoverAfterMs / 2),
    budgets: budgetSettingsOf(config),
    fairShare: fairShareOf({ ...config, scopes: fleet.scopes }),
    ...(fleet.maxInFlight === undefined ? {} : { maxInFlight: fleet.maxInFlight }),
    stream: flags['stream'] as 'always' | 'auto',
  };
}

export function registerWorkerCommand(program: Command): void {
  queueOptions(
    program
      .command('worker')
      .description(
        'run a worker: pulls jobs only after the shared budget admits them, calls the provider',
      )
      .option(
        '--concurrency <n>',
        "this process's calls in flight (env LLMQ_CONCURRENCY, default 10)",
      )
      .option(
        '--max-in-flight <n>',
        'calls in flight across every worker (env LLMQ_MAX_IN_FLIGHT, default no cap)',
      )
      .option('--rpm <n>', 'requests per window (env LLMQ_RPM)')
      .option('--tpm <n>', 'input + output tokens per window (env LLMQ_TPM)')
      .option('--itpm <n>', 'input tokens per window (env LLMQ_ITPM)')
      .option('--otpm <n>', 'output tokens per window (env LLMQ_OTPM)')
      .option('--window <seconds>', "the provider's window (env LLMQ_WINDOW_S, default 60)")
      .addOption(
        new Option(
          '--output-accounting <mode>',
          'how the provider charges output (env LLMQ_OUTPUT_ACCOUNTING)',
        ).choices(['reserve', 'actual']),
      )
      .option(
        '--headroom <share>',
        'share of each limit left unused (env LLMQ_HEADROOM, default 0)',
      )
      .addOption(
        new Option('--stream <mode>', 'stream every call, or only when needed')
          .choices(['always', 'auto'])
          .default('always'),
      )
      .option(
        '--retry-for <duration>',
        'how long transient failures (529, 5xx, timeouts, dropped connections) are retried, from the first; 0 makes them spend attempts (env LLMQ_RETRY_FOR, default 10m)',
      )
      .option(
        '--first-byte-timeout <duration>',
        'how long a call waits for its first byte, for a small request (a large input adds a second per 4,000 tokens); past it the call is aborted and its job retried by time, or moved in a pool (env LLMQ_FIRST_BYTE_TIMEOUT, default 20s)',
      )
      .option(
        '--idle-timeout <duration>',
        'the longest silence between two reads of an answer, as past the first byte (env LLMQ_IDLE_TIMEOUT, default 30s)',
      )
      .option(
        '--replace-limits',
        "store this worker's limits as the fleet's even when they differ from the stored ones (`llmq limits show`)",
      )
      .option('--grace <seconds>', 'on SIGTERM, how long calls in flight may take to finish', '30')
      .option(
        '--health-port <n>',
        'serve /healthz, /readyz and /metrics of this process on this port (0 picks a free one)',
      )
      .option(
        '--health-host <addr>',
        'address the probes bind (0.0.0.0 for Kubernetes probes)',
        '127.0.0.1',
      ),
  ).action(async (flags: Record<string, unknown>) => {
    const config = configFrom(flags);
    // pino JSON lines on stderr (LLMQ_LOG_LEVEL); traces when OTEL_* configures an exporter.
    const stderrLogger = workerLogger(createLogger({ component: 'worker' }));
    const stopTracing = await startTracing('llmq-worker');
    // A pool's credentials are checked here, before Redis: a missing variable is named at once.
    const deployments = config.deployments.length
      ? await createPoolEntries(config.deployments, process.env)
      : undefined;
    if (!deployments && !config.anthropicApiKey) {
      throw new ConfigError(
        'ANTHROPIC_API_KEY is not set: export your provider key, or configure deployments ' +
          '(LLMQ_DEPLOYMENTS; or run `llmq demo`, which uses the mock server)',
      );
    }
    const grace = Number(flags['grace']);
    if (!Number.isFinite(grace) || grace < 0)
      throw new ConfigError(
        `--grace must be a number of seconds from 0 up, got ${JSON.stringify(flags['grace'])}`,
      );
    const healthPort = healthPortOf(flags['healthPort']);
    await assertRedis(config.redisUrl);
    const redis = connectRedis(config.redisUrl);
    redis.on('error', errorEventLog(stderrLogger, 'redis error'));
    const { fleet, action } = await fleetLimitsFor(redis, config, flags['replaceLimits'] === true);
    // A worker refused at start (another build's queue, bad options) exits at once: nothing of
    // it may keep the process alive.
    const options = workerOptionsOf(redis, config, fleet, deployments, flags);
    const handle = await startWorker({ ...options, logger: stderrLogger }).catch(
      async (err: unknown) => {
        redis.disconnect();
        await stopTracing?.();
        throw err;
      },
    );
    stderrLogger.info(`limits ${action}: ${describeLimits(fleet)}`, { limits: action });
    const probes =
      healthPort === undefined
        ? undefined
        : await startHealthServer({
            worker: handle,
            redis,
            names: namesOf(config),
            limits: fleet,
            port: healthPort,
            host: String(flags['healthHost']),
            // No step of a sound gate outlasts a few of the provider's windows.
            stallMs: Math.max(600_000, 3 * fleet.windowS * 1000),
          });
    if (probes)
      stderrLogger.info(`health probes at ${probes.url} (/healthz, /readyz, /metrics)`, {
        health: probes.url,
      });
    await new Promise<void>((resolve) => {
      const stop = (signal: string) => {
        stderrLogger.info(`${signal}: draining calls in flight`, {
          inFlight: handle.inFlight(),
          graceS: grace,
        });
        resolve();
      };
      process.once('SIGTERM', () => stop('SIGTERM'));
      process.once('SIGINT', () => stop('SIGINT'));
    });
    // The probes answer through the drain (/readyz: draining), and close with the worker.
    await handle.stop(grace * 1000);
    await probes?.close();
    await redis.quit().catch(() => redis.disconnect());
    stderrLogger.info('worker stopped');
    await stopTracing?.();
  });
}
