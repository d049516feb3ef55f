import { readFileSync } from 'node:fs';
import { bullPrefix, type QueueNames } from '../../../shared/keys.ts';
import type { LlmqQueue } from '../../../shared/queues.ts';
import type { RedisClient } from '../../../shared/redis.ts';
import type { MockStats } from '../../../testing/mock-anthropic/index.ts';

/** Where an acknowledged job came from. */
export type JobSource = 'library' | 'http' | 'batch';

/** One acknowledged job, as BullMQ sees it once the run is over. */
export interface JobOutcome {
  readonly id: string;
  readonly source: JobSource;
  /** BullMQ's state (`completed`, `failed`, `unknown` when the job is gone…). */
  readonly state: string;
  /** `completed` events of the job in BullMQ's event stream. */
  readonly completions: number;
  /** Its stored result has a message with output tokens. */
  readonly hasResult: boolean;
}

/** `completed` events per job id, from BullMQ's event stream of the queue. */
export async function completedEvents(
  redis: RedisClient,
  names: QueueNames,
): Promise<Map<string, number>> {
  const key = `${bullPrefix(names)}:${names.queue}:events`;
  // BullMQ trims the stream near 10,000 events: a run that big could not be counted whole.
  const length = await redis.xlen(key);
  if (length > 9_000) throw new Error(`the event stream holds ${length} events: it may be trimmed`);
  const entries = (await redis.xrange(key, '-', '+')) as [string, string[]][];
  const out = new Map<string, number>();
  for (const [, fields] of entries) {
    const f: Record<string, string> = {};
    for (let i = 0; i + 1 < fields.length; i += 2) f[fields[i]!] = fields[i + 1]!;
    if (f['event'] === 'completed' && f['jobId'])
      out.set(f['jobId'], (out.get(f['jobId']) ?? 0) + 1);
  }
  return out;
}

/** Each acknowledged job's state, completions and result (one entry per id, its first source). */
export async function readOutcomes(
  queue: LlmqQueue,
  redis: RedisClient,
  names: QueueNames,
  acknowledged: readonly { readonly id: string; readonly source: JobSource }[],
): Promise<JobOutcome[]> {
  const completions = await completedEvents(redis, names);
  const seen = new Set<string>();
  const out: JobOutcome[] = [];
  for (const { id, source } of acknowledged) {
    if (seen.has(id)) continue;
    seen.add(id);
    const job = await queue.getJob(id);
    const tokens = job?.returnvalue?.message?.usage?.output_tokens;
    out.push({
      id,
      source,
      state: job ? await job.getState() : 'unknown',
      completions: completions.get(id) ?? 0,
      hasResult: typeof tokens === 'number' && tokens > 0,
    });
  }
  return out;
}

/** The results file of `llmq batch summarize`: lines per document, and the ids of its summaries. */
export interface BatchLines {
  /** Lines per document path. */
  readonly perDocument: Readonly<Record<string, number>>;
  /** Lines that are errors, not summaries. */
  readonly errors: number;
  /** The job id of each summary line. */
  readonly ids: readonly string[];
}

export function readBatchLines(path: string): BatchLines {
  let text = '';
  try {
    text = readFileSync(path, 'utf8');
  } catch {
    // No results file: no line.
  }
  const perDocument: Record<string, number> = {};
  const ids: string[] = [];
  let errors = 0;
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    const v = JSON.parse(line) as { file: string; id: string; summary?: string };
    perDocument[v.file] = (perDocument[v.file] ?? 0) + 1;
    if (typeof v.summary === 'string') ids.push(v.id);
    else errors++;
  }
  return { perDocument, errors, ids };
}

/** The provider's side of the run, from the mock's stats. */
export interface ProviderFigures {
  readonly attempts: number;
  /** Calls the mock admitted and charged. */
  readonly admitted: number;
  readonly rateLimited: number;
  /** Admitted calls beyond one per completed job: calls made again after a kill. */
  readonly repeated: number;
  readonly worstWindowTokens: number;
  readonly limitTokens: number;
}

export function providerFigures(stats: MockStats, completedJobs: number): ProviderFigures {
  return {
    attempts: stats.attempts,
    admitted: stats.admitted,
    rateLimited: stats.responses['429'] ?? 0,
    repeated: stats.admitted - completedJobs,
    worstWindowTokens: stats.worstWindow.tokens,
    limitTokens: stats.limits.tokens ?? Number.NaN,
  };
}
