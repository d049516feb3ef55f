import { ReplyError } from 'ioredis';
import { LimiterUnavailableError } from './errors.ts';
import { isCluster, type RedisClient } from './redis.ts';
import { slotMaster } from './redis-slot.ts';

/**
 * Why commands cannot be answered now, from a lost connection until ioredis is ready again; or
 * undefined. Between two retries it is 'connecting' for a moment, as on the first connection
 * (whose commands should wait for it); its retry counter, reset when ready, tells the two apart.
 */
function lostConnection(redis: RedisClient, key: string): string | undefined {
  if (isCluster(redis) && redis.status === 'ready') {
    // A Cluster stays ready while one master is replaced: look at the one serving this key.
    const master = slotMaster(redis, key);
    if (!master) return 'Redis Cluster has no reachable master for this queue (failover?)';
    return lostConnection(master, key);
  }
  const s = redis.status;
  const lost = `Redis connection is ${s}`;
  if (s === 'reconnecting' || s === 'end' || s === 'close') return lost;
  const retries = (redis as unknown as { retryAttempts?: number }).retryAttempts ?? 0;
  return (s === 'connecting' || s === 'connect') && retries > 0 ? lost : undefined;
}

/** One command to send failing closed, and the one that reverses it if its answer is lost. */
export interface FailClosedCommand {
  readonly redis: RedisClient;
  /** A key of the command (on a cluster, its master is the one whose connection is checked). */
  readonly key: string;
  readonly timeoutMs: number;
  readonly send: () => Promise<unknown>;
  /**
   * Reverses the command: when it was sent but no answer came (timeout, dropped connection), it
   * may still run later (ioredis queues it, and resends unanswered ones after reconnecting) or
   * may have run with its answer lost, so the undo is queued behind it on the same connection,
   * to run whenever Redis answers again.
   */
  readonly undo?: () => Promise<unknown>;
}

/**
 * Sends a command failing closed: refused at once while the connection is lost (commands sent
 * then would queue until Redis comes back), given up after `timeoutMs`; every failure is a
 * {@link LimiterUnavailableError}, so a paid quota is never spent when Redis cannot answer.
 */
export async function runFailClosed(c: FailClosedCommand): Promise<unknown> {
  const lost = lostConnection(c.redis, c.key);
  if (lost) throw new LimiterUnavailableError(lost);
  let undo = c.undo;
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      c.send().catch((err: unknown) => {
        // An error reply means Redis answered: nothing is left to undo.
        if (err instanceof ReplyError) undo = undefined;
        throw err;
      }),
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () =>
            reject(new LimiterUnavailableError(`no answer from Redis within ${c.timeoutMs} ms`)),
          c.timeoutMs,
        );
      }),
    ]);
  } catch (err) {
    if (undo) undo().catch(() => {});
    if (err instanceof LimiterUnavailableError) throw err;
    throw new LimiterUnavailableError((err as Error).message, { cause: err });
  } finally {
    clearTimeout(timer);
  }
}
