import type { Redis } from 'ioredis';
import { forEachMaster, type RedisClient } from '../../shared/redis.ts';

/** One master's CPU seconds since it started (user + system, from INFO cpu). */
export interface MasterCpu {
  /** `host:port` of the master. */
  readonly master: string;
  readonly cpuS: number;
}

const nameOf = (m: Redis) => `${m.options.host ?? '127.0.0.1'}:${m.options.port ?? 6379}`;

/** CPU seconds each master has used (one entry on a single node or Sentinel). */
export function masterCpuSeconds(redis: RedisClient): Promise<MasterCpu[]> {
  return forEachMaster(redis, async (m) => {
    const info = await m.info('cpu');
    let cpuS = 0;
    for (const x of info.matchAll(/^used_cpu_(?:sys|user):([\d.]+)/gm)) cpuS += Number(x[1]);
    return { master: nameOf(m), cpuS };
  });
}

/** CPU seconds the Redis servers have used, summed over every master. */
export async function redisCpuSeconds(redis: RedisClient): Promise<number> {
  return (await masterCpuSeconds(redis)).reduce((a, b) => a + b.cpuS, 0);
}

/** Bytes in use (INFO used_memory), summed over every master. */
export async function usedMemory(redis: RedisClient): Promise<number> {
  const each = await forEachMaster(redis, async (m) => {
    const info = await m.info('memory');
    return Number(/used_memory:(\d+)/.exec(info)?.[1] ?? Number.NaN);
  });
  return each.reduce((a, b) => a + b, 0);
}
