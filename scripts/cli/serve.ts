import type { Command } from 'commander';
import { ApiKeyStore } from '../../producer/http/api-keys.ts';
import { startHttpApi } from '../../producer/http/server.ts';
import { ConfigError } from '../../shared/errors.ts';
import { assertRedis } from '../../shared/redis.ts';
import { untilStopSignal } from '../../shared/signals.ts';
import { createLogger, workerLogger } from '../../shared/telemetry/logger.ts';
import { startTracing } from '../../shared/telemetry/sdk.ts';
import { configFrom, queueOptions } from './common.ts';

interface ServeFlags {
  port?: string;
  host?: string;
  queue?: string;
  prefix?: string;
  config?: string;
  apiKeysFile?: string;
  maxWait?: string;
  countTokensRpm?: string;
  bodyLimit?: string;
}

/** Adds `llmq serve`: the HTTP enqueue API. */
export function registerServeCommand(program: Command): Command {
  return queueOptions(program.command('serve'))
    .description(
      'serve the HTTP enqueue API (POST /v1/jobs, GET /v1/jobs/:id[/wait], DELETE /v1/jobs/:id, GET /openapi.json) ' +
        'and the drop-in Messages API (POST /v1/messages[/count_tokens]); ' +
        'API keys from LLMQ_API_KEYS ("tenant:sha256hex[:priority],…") or --api-keys-file; ' +
        'count_tokens is forwarded with ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL)',
    )
    .option('--port <n>', 'port to listen on', '8080')
    .option('--host <addr>', 'address to bind (default only this machine)', '127.0.0.1')
    .option('--api-keys-file <path>', 'file of tenant:sha256hex lines (env LLMQ_API_KEYS_FILE)')
    .option(
      '--max-wait <s>',
      'longest /wait long-poll, and longest a /v1/messages call waits to start (then 529), in seconds',
      '60',
    )
    .option('--count-tokens-rpm <n>', 'count_tokens requests forwarded per minute', '100')
    .option('--body-limit <size>', 'largest request body read (env LLMQ_BODY_LIMIT, default 32mb)')
    .action(async (flags: ServeFlags) => {
      const config = configFrom({ ...flags });
      const port = Number(flags.port);
      if (!Number.isInteger(port) || port < 0 || port > 65_535) {
        throw new ConfigError(
          `--port must be a whole number from 0 to 65535, got ${JSON.stringify(flags.port)}`,
        );
      }
      const maxWait = Number(flags.maxWait);
      if (!Number.isFinite(maxWait) || maxWait < 0 || maxWait > 3_600) {
        throw new ConfigError(
          `--max-wait must be a number of seconds from 0 to 3600, got ${JSON.stringify(flags.maxWait)}`,
        );
      }
      const countTokensRpm = Number(flags.countTokensRpm);
      if (!Number.isInteger(countTokensRpm) || countTokensRpm < 1) {
        throw new ConfigError(
          `--count-tokens-rpm must be a whole number from 1 up, got ${JSON.stringify(flags.countTokensRpm)}`,
        );
      }
      const keys = ApiKeyStore.fromSources({ env: process.env, file: flags.apiKeysFile });
      if (keys.size === 0) {
        throw new ConfigError(
          'no API keys: set LLMQ_API_KEYS to "tenant:sha256hex,…" (printf %s KEY | sha256sum) or pass --api-keys-file',
        );
      }
      const log = createLogger({ component: 'serve' });
      await assertRedis(config.redisUrl);
      // Enqueue spans continue each request's traceparent when OTEL_* configures an exporter.
      const stopTracing = await startTracing('llmq-serve');
      const api = await startHttpApi({
        config,
        apiKeys: keys,
        host: flags.host ?? '127.0.0.1',
        port,
        maxWaitMs: maxWait * 1000,
        authThrottle: { log: (line) => process.stderr.write(`llmq serve: ${line}\n`) },
        logger: workerLogger(log),
        gateway: { countTokensRpm },
      });
      process.stdout.write(`${api.url}\n`);
      log.info(
        { queue: config.queue, apiKeys: keys.size, url: api.url, tracing: !!stopTracing },
        'serving the HTTP API; Ctrl-C stops',
      );
      await untilStopSignal();
      await api.close();
      await stopTracing?.();
      log.info('stopped');
    });
}
