/**
 * Which worker processes of a queue are running: each marks itself present in Redis, renewed
 * while it runs, removed when it stops; a process that dies lapses after `ttlMs`. The gateway
 * reads it to tell a caller whose call never started that no worker runs (not that the budget
 * is spent).
 */
import { type QueueNames, workersKey } from './keys.ts';
import { loadLuaScripts, runLua } from './lua-scripts.ts';
import type { RedisClient } from './redis.ts';

const SCRIPTS = loadLuaScripts(new URL('./lua', import.meta.url).pathname);

/** How long a mark lasts without renewal. */
export const PRESENCE_TTL_MS = 15_000;

/** A running worker's mark: renewed every third of its life until {@link WorkerPresence.stop}. */
export class WorkerPresence {
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly redis: RedisClient,
    private readonly names: QueueNames,
    private readonly id: string,
    private readonly ttlMs = PRESENCE_TTL_MS,
  ) {}

  /** Marks the worker present now, then keeps renewing (a failed renewal waits for the next). */
  async start(): Promise<void> {
    await this.mark();
    this.timer = setInterval(() => void this.mark().catch(() => {}), this.ttlMs / 3);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.redis.zrem(workersKey(this.names), this.id).catch(() => {});
  }

  private mark(): Promise<unknown> {
    return runLua(
      this.redis,
      SCRIPTS['presence']!,
      [workersKey(this.names)],
      [this.id, this.ttlMs],
    );
  }
}

/** How many worker processes of the queue are running now (their marks not lapsed). Reads only. */
export async function countWorkers(redis: RedisClient, names: QueueNames): Promise<number> {
  const reply = (await redis
    .multi()
    .time()
    .zrangebyscore(workersKey(names), '-inf', '+inf', 'WITHSCORES')
    .exec()) as [[null, [string, string]], [null, string[]]];
  const [[, t], [, marks]] = reply;
  const now = Number(t[0]) * 1000 + Math.floor(Number(t[1]) / 1000);
  let n = 0;
  for (let i = 1; i < marks.length; i += 2) if (Number(marks[i]) > now) n++;
  return n;
}
