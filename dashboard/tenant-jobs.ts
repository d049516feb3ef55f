/**
 * A tenant's jobs for its page: the latest tries it finished (kept by the usage history, each
 * marked when its job is now a dead letter) and those under way or waiting, found among the
 * first jobs of the queue's sets. Reads only.
 */

import type { RecentJob } from '../shared/history.ts';
import { readRecentJobs } from '../shared/history-reader.ts';
import type { JobData } from '../shared/job.ts';
import { bullPrefix, deadLetterQueueName, type QueueNames } from '../shared/keys.ts';
import { firstJobs } from '../shared/queue-sets.ts';
import type { RedisClient } from '../shared/redis.ts';

export interface FinishedTry extends RecentJob {
  /** Its job is among the dead letters now (Bull Board shows it there). */
  readonly deadLetter: boolean;
}

export interface PendingJob {
  readonly id: string;
  readonly state: 'active' | 'waiting' | 'delayed';
  readonly enqueuedAt: number | null;
  readonly model: string | null;
}

export interface TenantJobs {
  readonly finished: readonly FinishedTry[];
  readonly pending: readonly PendingJob[];
  /** Jobs looked at for `pending` (the first of each set), and how many there are in all. */
  readonly scanned: number;
  readonly total: number;
}

/** Jobs looked at per set for the pending list; the list shows the first 20 found. */
const SCAN = 500;
const SHOW = 20;

async function pendingOf(
  redis: RedisClient,
  names: QueueNames,
  tenant: string,
): Promise<Omit<TenantJobs, 'finished'>> {
  const base = `${bullPrefix(names)}:${names.queue}:`;
  const first = await firstJobs(redis, names, ['active', 'prioritized', 'wait', 'delayed'], SCAN);
  const { active = [], prioritized = [], wait = [], delayed = [] } = first.ids;
  const states: [string, PendingJob['state']][] = [
    ...active.map((id) => [id, 'active'] as [string, PendingJob['state']]),
    ...[...prioritized, ...wait].map((id) => [id, 'waiting'] as [string, PendingJob['state']]),
    ...delayed.map((id) => [id, 'delayed'] as [string, PendingJob['state']]),
  ];
  const pipe = redis.pipeline();
  for (const [id] of states) pipe.hget(`${base}${id}`, 'data');
  const datas = states.length > 0 ? ((await pipe.exec()) ?? []) : [];
  const pending: PendingJob[] = [];
  datas.forEach(([err, raw], i) => {
    if (err || typeof raw !== 'string' || pending.length >= SHOW) return;
    let d: Partial<JobData>;
    try {
      d = JSON.parse(raw) as Partial<JobData>;
    } catch {
      return;
    }
    if (d.tenant !== tenant) return;
    const [id, state] = states[i]!;
    pending.push({ id, state, enqueuedAt: d.enqueuedAt ?? null, model: d.request?.model ?? null });
  });
  return { pending, scanned: states.length, total: first.total };
}

/** The tenant's latest finished tries and its pending jobs. */
export async function readTenantJobs(
  redis: RedisClient,
  names: QueueNames,
  tenant: string,
): Promise<TenantJobs> {
  const [recent, pending] = await Promise.all([
    readRecentJobs(redis, names, tenant),
    pendingOf(redis, names, tenant),
  ]);
  const letters = `${bullPrefix(names)}:${deadLetterQueueName(names.queue)}:`;
  const dead =
    recent.length > 0
      ? await Promise.all(recent.map((j) => redis.exists(`${letters}${j.id}`)))
      : [];
  return { finished: recent.map((j, i) => ({ ...j, deadLetter: dead[i] === 1 })), ...pending };
}
