import { bullPrefix, type QueueNames } from './keys.ts';
import type { RedisClient } from './redis.ts';

/** The sets BullMQ keeps a queue's unfinished jobs in: lists, or sorted sets by score. */
const KINDS = { active: 'list', prioritized: 'zset', wait: 'list', delayed: 'zset' } as const;
export type JobSet = keyof typeof KINDS;

/** The first ids of some of a queue's sets, each set's own, and how many they hold in all. */
export interface FirstJobs {
  readonly ids: Readonly<Partial<Record<JobSet, readonly string[]>>>;
  readonly total: number;
}

/** The first `max` ids of each of `sets` and their sizes, in one transaction. Reads only. */
export async function firstJobs(
  redis: RedisClient,
  names: QueueNames,
  sets: readonly JobSet[],
  max: number,
): Promise<FirstJobs> {
  const base = `${bullPrefix(names)}:${names.queue}:`;
  const tx = redis.multi();
  for (const set of sets) {
    if (KINDS[set] === 'list') tx.lrange(`${base}${set}`, 0, max - 1);
    else tx.zrange(`${base}${set}`, 0, String(max - 1));
  }
  for (const set of sets) {
    if (KINDS[set] === 'list') tx.llen(`${base}${set}`);
    else tx.zcard(`${base}${set}`);
  }
  const replies = (await tx.exec())!.map(([err, v]) => {
    if (err) throw err;
    return v;
  });
  const ids = Object.fromEntries(sets.map((set, i) => [set, replies[i] as string[]]));
  const total = replies.slice(sets.length).reduce<number>((a, n) => a + (n as number), 0);
  return { ids, total };
}
