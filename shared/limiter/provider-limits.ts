import { DIMENSIONS } from '../dimensions.ts';
import type { QueueNames } from '../keys.ts';
import type { RedisClient } from '../redis.ts';
import { limiterKeys } from './limiter-keys.ts';
import type { DimensionLimits } from './types.ts';

/**
 * The provider's limits as last read from its headers, per scope (a model's, where readings
 * land; see docs/limiter.md): only the dimensions read. One HMGET of the view. Reads only.
 */
export async function readProviderLimits(
  redis: RedisClient,
  names: QueueNames,
  scopes: readonly string[],
): Promise<Record<string, DimensionLimits>> {
  if (scopes.length === 0) return {};
  const fields = scopes.flatMap((scope) => DIMENSIONS.map((d) => `${scope}|${d.lua}|lim`));
  const values = await redis.hmget(limiterKeys(names).view, ...fields);
  const out: Record<string, DimensionLimits> = {};
  scopes.forEach((scope, i) => {
    const read: Record<string, number> = {};
    DIMENSIONS.forEach((d, j) => {
      const v = Number(values[i * DIMENSIONS.length + j] ?? Number.NaN);
      if (v > 0) read[d.name] = v;
    });
    out[scope] = read;
  });
  return out;
}
