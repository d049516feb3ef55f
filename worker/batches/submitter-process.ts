import type { Config } from '../../shared/config.ts';
import { ConfigError } from '../../shared/errors.ts';
import { formatUsd } from '../../shared/prices.ts';
import { connectRedis } from '../../shared/redis.ts';
import { batchesClientOf } from '../deployment-clients.ts';
import { createProviderClient } from '../provider.ts';
import { type BatchProgress, type BatchSubmitterHandle, startBatchSubmitter } from './submitter.ts';

/** One progress line: batches and items now, the queue's totals, and what batches saved. */
export function batchProgressLine(p: BatchProgress): string {
  const t = p.totals;
  return (
    `batches: ${p.batchesInFlight} in flight (${p.itemsProcessing} items processing), ` +
    `${t.batchesEnded}/${t.batches} ended; items ${t.succeeded} succeeded, ${t.errored} errored, ` +
    `${t.expired} expired, ${t.canceled} canceled, ${t.retried} retried; saved ${formatUsd(t.savedUsd)}`
  );
}

/** The client batches go through: the pool's first that takes them, else the one key. */
function clientFor(config: Config, env: Readonly<Record<string, string | undefined>>) {
  if (config.deployments.length > 0) return batchesClientOf(config.deployments, env);
  if (!config.anthropicApiKey) {
    throw new ConfigError(
      'Message Batches are submitted from this process: set ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL for another endpoint)',
    );
  }
  return createProviderClient({ apiKey: config.anthropicApiKey, baseURL: config.anthropicBaseUrl });
}

/**
 * Starts a batch submitter for a resolved config, its progress on stderr; with a pool, through
 * its first deployment that takes batches.
 * @throws ConfigError when no provider key is set, or no deployment of the pool takes batches.
 */
export function startSubmitterFor(
  config: Config,
  out: { write(chunk: string): boolean } = process.stderr,
  env: Readonly<Record<string, string | undefined>> = process.env,
): BatchSubmitterHandle {
  const client = clientFor(config, env);
  const redis = connectRedis(config.redisUrl);
  redis.on('error', () => {});
  let last = '';
  const handle = startBatchSubmitter({
    redis,
    names: { prefix: config.prefix, queue: config.queue },
    client,
    onProgress: (p) => {
      const line = batchProgressLine(p);
      if (line !== last) out.write(`${line}\n`);
      last = line;
    },
    onError: (err) =>
      out.write(`batches: ${(err as Error).message ?? String(err)} (trying again)\n`),
  });
  return {
    done: handle.done,
    stop: async () => {
      await handle.stop();
      redis.disconnect();
    },
  };
}
