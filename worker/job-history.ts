import { Batcher } from '../shared/batcher.ts';
import { bullPrefix, type QueueNames } from '../shared/keys.ts';
import { loadLuaScripts, runLua } from '../shared/lua-scripts.ts';
import type { RedisClient } from '../shared/redis.ts';

const SCRIPTS = loadLuaScripts(new URL('./lua', import.meta.url).pathname);

/** How long history lines wait for others: written with the metrics' rhythm, not per line. */
const HISTORY_FLUSH_MS = 100;

/**
 * A job's own history (admitted after what wait, the call, retried, dead-lettered) in its BullMQ
 * log, which Bull Board's Logs tab shows. Lines of every job gather for up to
 * {@link HISTORY_FLUSH_MS} and go in one command: no round trip of their own per job.
 */
export class JobHistory {
  private readonly batcher: Batcher<{ jobId: string; line: string }, void>;

  private readonly enabled: boolean;

  /** @param options.enabled write job logs at all @default true */
  constructor(
    redis: RedisClient,
    names: QueueNames,
    options: { readonly flushMs?: number; readonly enabled?: boolean } = {},
  ) {
    this.enabled = options.enabled ?? true;
    const base = `${bullPrefix(names)}:${names.queue}:`;
    this.batcher = new Batcher<{ jobId: string; line: string }, void>(
      async (items) => {
        await runLua(
          redis,
          SCRIPTS['logs']!,
          [`${base}meta`],
          [base, ...items.flatMap((i) => [i.jobId, i.line])],
        );
        return [];
      },
      { delayMs: options.flushMs ?? HISTORY_FLUSH_MS, maxBatch: 500 },
    );
  }

  /** Appends lines to a job's log (stamped with the time); resolves once written. */
  write(jobId: string | undefined, ...lines: string[]): Promise<void> {
    if (!jobId || !this.enabled) return Promise.resolve();
    const at = new Date().toISOString();
    return Promise.all(lines.map((l) => this.batcher.push({ jobId, line: `${at} ${l}` }))).then(
      () => {},
    );
  }
}
