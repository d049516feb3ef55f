import type { Redis } from 'ioredis';
import { llmqKey, type QueueNames } from './keys.ts';

/**
 * Counters every worker process adds to in Redis, so one dashboard (and `/metrics`) sees the
 * whole fleet. One hash per queue; fields are listed in {@link MetricField}.
 */
export type MetricField =
  | 'provider_calls'
  | 'provider_ok'
  | 'provider_429_retry_after'
  | 'provider_429_final'
  | 'provider_5xx'
  | 'provider_connection_errors'
  | 'provider_4xx'
  | 'retries'
  | 'deferred_by_scope'
  | 'dead_lettered'
  | 'completed'
  | 'latency_sum_ms'
  | 'latency_count'
  | 'tokens_in'
  | 'tokens_out';

/** Upper bounds (ms) of the provider latency histogram's buckets. */
export const LATENCY_BUCKETS_MS = [
  50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 120_000,
] as const;

export function metricsKey(names: QueueNames): string {
  return llmqKey(names, 'metrics');
}

/** Adds to counters in one round trip. */
export async function addMetrics(
  redis: Redis,
  names: QueueNames,
  add: Partial<Record<MetricField, number>>,
): Promise<void> {
  const key = metricsKey(names);
  const m = redis.multi();
  for (const [f, n] of Object.entries(add)) if (n) m.hincrby(key, f, n);
  await m.exec();
}

/**
 * Records one provider call's latency in the histogram (cumulative `le_<ms>` buckets), with
 * other counters in the same round trip.
 */
export async function observeLatency(
  redis: Redis,
  names: QueueNames,
  ms: number,
  add: Partial<Record<MetricField, number>> = {},
): Promise<void> {
  const key = metricsKey(names);
  const m = redis.multi();
  for (const le of LATENCY_BUCKETS_MS) if (ms <= le) m.hincrby(key, `le_${le}`, 1);
  m.hincrby(key, 'latency_sum_ms', Math.round(ms));
  m.hincrby(key, 'latency_count', 1);
  for (const [f, n] of Object.entries(add)) if (n) m.hincrby(key, f, n);
  await m.exec();
}

export async function readMetrics(
  redis: Redis,
  names: QueueNames,
): Promise<Record<string, number>> {
  const raw = await redis.hgetall(metricsKey(names));
  return Object.fromEntries(Object.entries(raw).map(([k, v]) => [k, Number(v)]));
}
