import type { Redis } from 'ioredis';
import { isCluster, type RedisClient } from '../shared/redis.ts';
import type { WorkerLogger } from './logger.ts';

const address = (r: Redis) =>
  r.stream?.remoteAddress ? `${r.stream.remoteAddress}:${r.stream.remotePort}` : 'Redis';

/**
 * Logs a lost connection once, and its return with where it went (after a failover, the
 * promoted replica) and how long it took. On a Cluster: a master lost and the slot map's new
 * masters. Returns a function that stops listening.
 */
export function logConnectionChanges(redis: RedisClient, log: WorkerLogger): () => void {
  if (isCluster(redis)) {
    // ioredis reports every failed reconnect of a node: one line per node until it is back.
    const down = new Set<string>();
    const onError = (_err: Error, node: string) => {
      if (down.has(node)) return;
      down.add(node);
      log.warn('lost a Redis Cluster node; the queues on it wait for a replica to take over', {
        node,
      });
    };
    const onAdd = (r: Redis) => {
      // At start every master is added: only one that comes while a node is down is news.
      if (down.size === 0) return;
      down.clear();
      log.info('Redis Cluster slot map renewed; the worker carries on', {
        node: `${r.options.host}:${r.options.port}`,
      });
    };
    redis.on('node error', onError);
    redis.on('+node', onAdd);
    return () => {
      redis.off('node error', onError);
      redis.off('+node', onAdd);
    };
  }
  let was = address(redis);
  let lostAt: number | undefined;
  const onClose = () => {
    if (lostAt !== undefined) return;
    lostAt = Date.now();
    log.warn('lost the Redis connection; reconnecting', { was });
  };
  const onReady = () => {
    was = address(redis);
    if (lostAt === undefined) return;
    log.info('Redis connection back; the worker carries on', {
      now: was,
      afterMs: Date.now() - lostAt,
    });
    lostAt = undefined;
  };
  redis.on('close', onClose);
  redis.on('ready', onReady);
  return () => {
    redis.off('close', onClose);
    redis.off('ready', onReady);
  };
}
