import type { Config } from '../../shared/config.ts';
import { byPreference, takesBatches } from '../../shared/deployments.ts';
import { ConfigError } from '../../shared/errors.ts';
import { keptBoundsOf } from '../../shared/held.ts';
import { formatUsd } from '../../shared/prices.ts';
import { connectRedis } from '../../shared/redis.ts';
import { batchesClientOf } from '../deployment-clients.ts';
import { createProviderClient } from '../provider.ts';
import {
  type BatchProgress,
  type BatchSubmitterHandle,
  type BatchSubmitterOptions,
  startBatchSubmitter,
} from './submitter.ts';

/** One progress line: batches and items now, the queue's totals, and what batches saved. */
export function batchProgressLine(p: BatchProgress): string {
  const t = p.totals;
  return (
    `batches: ${p.batchesInFlight} in flight (${p.itemsProcessing} items processing), ` +
    `${t.batchesEnded}/${t.batches} ended; items ${t.succeeded} succeeded, ${t.errored} errored, ` +
    `${t.expired} expired, ${t.canceled} canceled, ${t.retried} retried; saved ${formatUsd(t.savedUsd)}`
  );
}

type Env = Readonly<Record<string, string | undefined>>;

/**
 * Where batches go: with a pool, each deployment that takes them, best first (a pinned job's
 * batch to its pin, the others' to the first); else the one key.
 * @throws ConfigError when no provider key is set, or no deployment of the pool takes batches.
 */
function destinationsOf(
  config: Config,
  env: Env,
): Pick<BatchSubmitterOptions, 'client' | 'deployments'> {
  if (config.deployments.length > 0) {
    const takers = byPreference(config.deployments.map((c) => ({ config: c })))
      .map((e) => e.config)
      .filter(takesBatches);
    // None: batchesClientOf's ConfigError, naming the pool.
    if (takers.length === 0) batchesClientOf(config.deployments, env);
    return {
      deployments: takers.map((d) => ({ name: d.name, client: batchesClientOf([d], env) })),
    };
  }
  if (!config.anthropicApiKey) {
    throw new ConfigError(
      'Message Batches are submitted from this process: set ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL for another endpoint), or list deployments in the config (docs/deployments.md)',
    );
  }
  return {
    client: createProviderClient({
      apiKey: config.anthropicApiKey,
      baseURL: config.anthropicBaseUrl,
    }),
  };
}

/**
 * Starts a batch submitter for a resolved config, its progress on stderr; with a pool, through
 * its deployments that take batches (see {@link destinationsOf}).
 * @throws ConfigError when no provider key is set, or no deployment of the pool takes batches.
 */
export function startSubmitterFor(
  config: Config,
  out: { write(chunk: string): boolean } = process.stderr,
  env: Env = process.env,
): BatchSubmitterHandle {
  const destinations = destinationsOf(config, env);
  const redis = connectRedis(config.redisUrl);
  redis.on('error', () => {});
  let last = '';
  const handle = startBatchSubmitter({
    redis,
    names: { prefix: config.prefix, queue: config.queue },
    ...destinations,
    ...keptBoundsOf(config),
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
