import Anthropic from '@anthropic-ai/sdk';
import type { RedisOptions } from 'ioredis';
import type { Config } from '../shared/config.ts';
import {
  batchDeploymentsOf,
  budgetSettingsOf,
  globalLimits,
  poolNamesOf,
  scopeLimitsOf,
} from '../shared/config-views.ts';
import { connectRedis } from '../shared/redis.ts';
import { Producer, type ProducerOptions } from './producer.ts';

/**
 * A producer for a resolved {@link Config}: its own Redis connection (closed by `close()`), the
 * global limits (rpm, itpm, otpm, tpm) and headroom to refuse what can never fit, the depth
 * bound, the pool's deployments' names (a pin elsewhere is refused), and an SDK client for
 * `exactCount`. `overrides` set any other producer option
 * (`tenantMaxDepth`, `retryAfterMs`, `keepCompletedS`, …).
 *
 * @example
 * ```ts
 * const producer = createProducer(resolveConfig({ env: process.env }));
 * const id = await producer.enqueue({
 *   model: 'claude-haiku-4-5',
 *   max_tokens: 300,
 *   messages: [{ role: 'user', content: 'Hello' }],
 * });
 * const { message } = await producer.waitForResult(id, { timeout: 60_000 });
 * await producer.close();
 * ```
 */
export function createProducer(
  config: Config,
  overrides: Partial<Omit<ProducerOptions, 'redis' | 'names'>> & {
    readonly redisOptions?: RedisOptions;
  } = {},
): Producer {
  const { redisOptions, ...rest } = overrides;
  const redis = connectRedis(config.redisUrl, redisOptions);
  redis.on('error', () => {});
  const tokenCounter =
    config.anthropicApiKey || config.anthropicBaseUrl
      ? new Anthropic({
          apiKey: config.anthropicApiKey ?? 'unset',
          baseURL: config.anthropicBaseUrl ?? null,
        })
      : undefined;
  return new Producer({
    redis,
    ownsRedis: true,
    redisUrl: config.redisUrl,
    names: { prefix: config.prefix, queue: config.queue },
    limits: globalLimits(config),
    scopes: scopeLimitsOf(config),
    modelsStrict: config.modelsStrict,
    budgets: budgetSettingsOf(config),
    headroom: config.headroom,
    maxDepth: config.maxDepth,
    maxDepthBytes: config.maxDepthBytes,
    // A job pinning a deployment the pool lacks is refused at enqueue; so is a batch job none
    // of it takes.
    deployments: poolNamesOf(config),
    batchDeployments: batchDeploymentsOf(config),
    ...(tokenCounter ? { tokenCounter } : {}),
    ...rest,
  });
}
