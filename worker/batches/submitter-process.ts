import type { Config } from '../../shared/config.ts';
import { byPreference, takesBatches } from '../../shared/deployments.ts';
import { ConfigError } from '../../shared/errors.ts';
import { formatUsd } from '../../shared/prices.ts';
import { connectRedis } from '../../shared/redis.ts';
import { createDeploymentCallers } from '../deployment-clients.ts';
import { createProviderClient, type MessagesClient } from '../provider.ts';
import {
  type BatchesClient,
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

/** The client's Message Batches; a ConfigError when its SDK has none (only the Claude API's). */
function batchesOf(name: string, client: MessagesClient): BatchesClient {
  if (!(client.messages as Partial<BatchesClient['messages']>).batches)
    throw new ConfigError(
      `deployment ${name}: its SDK offers no Message Batches: set its batches to false`,
    );
  return client as unknown as BatchesClient;
}

/**
 * Where the config's batches go: its deployments taking Message Batches, best first, when it
 * lists a pool (none of them: each batch job is dead-lettered with why); else the one key.
 * @throws ConfigError when no provider key is set, or a deployment's credentials are missing.
 */
async function destinationsOf(
  config: Config,
): Promise<Pick<BatchSubmitterOptions, 'client' | 'deployments'>> {
  if (config.deployments.length > 0) {
    const takers = byPreference(config.deployments.map((c) => ({ config: c }))).filter((e) =>
      takesBatches(e.config),
    );
    const callers = await createDeploymentCallers(takers.map((e) => e.config));
    return {
      deployments: takers.map(({ config: c }) => ({
        name: c.name,
        client: batchesOf(c.name, callers.get(c.name)!.client),
      })),
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
 * Starts a batch submitter for a resolved config, its progress on stderr.
 * @throws ConfigError when no provider key is set, or a deployment's credentials are missing.
 */
export async function startSubmitterFor(
  config: Config,
  out: { write(chunk: string): boolean } = process.stderr,
): Promise<BatchSubmitterHandle> {
  const destinations = await destinationsOf(config);
  const redis = connectRedis(config.redisUrl);
  redis.on('error', () => {});
  let last = '';
  const handle = startBatchSubmitter({
    redis,
    names: { prefix: config.prefix, queue: config.queue },
    ...destinations,
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
