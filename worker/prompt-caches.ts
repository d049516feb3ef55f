import { llmqKey, type QueueNames } from '../shared/keys.ts';
import type { RedisClient } from '../shared/redis.ts';
import type { HeadJob } from './head-job.ts';

/** How long a job writing a prefix holds the others back at most (a writer that died). */
const WRITING_MS = 30_000;
/** A prefix's cache lives 5 minutes after each use (the API's default lifetime). */
const READABLE_MS = 300_000;
/** How often a job behind a prefix being written looks again. */
const WAIT_FOR_WRITER_MS = 20;

/** What the usage of a call with a cached prefix says of it. */
export interface CacheUsage {
  readonly cache_creation_input_tokens?: number | null;
  readonly cache_read_input_tokens?: number | null;
}

/**
 * Prompt caching, fleet-wide: which cached prefixes are readable at the provider now (a call's
 * usage or its stream's start said so), which one a job is writing, which the provider does not
 * cache. Cache reads do not count toward the input limit, so a job whose prefix is readable
 * reserves only the rest of its input; among jobs that share a prefix nobody has written, the
 * first writes it and the others wait until it can be read, so that one write serves them all.
 * Keys per prefix, with expiries: `cache:<key>:{r,w,n}` (`r` holds the pool's deployment
 * that last used it, or '' outside a pool).
 */
export class PromptCaches {
  constructor(
    private readonly redis: RedisClient,
    private readonly names: QueueNames,
  ) {}

  private key(prefix: string, state: 'r' | 'w' | 'n'): string {
    return llmqKey(this.names, 'cache', prefix, state);
  }

  /**
   * The jobs of a round with their costs as the provider will count them (a readable prefix's
   * tokens taken off), cut before the first whose prefix is not readable yet; `waitMs` when the
   * head's prefix is being written by another job (the round waits). A head whose prefix nobody
   * writes becomes its writer. In a pool, a prefix is readable on the deployment that last used
   * it only: such a job carries it as `warm`, with the cost it has anywhere else.
   */
  async plan(turn: readonly HeadJob[]): Promise<{ turn: HeadJob[]; waitMs?: number }> {
    const keys = [...new Set(turn.flatMap((h) => (h.cache ? [h.cache.key] : [])))];
    if (keys.length === 0) return { turn: [...turn] };
    const states = await this.redis.mget(
      ...keys.flatMap((k) => [this.key(k, 'r'), this.key(k, 'w'), this.key(k, 'n')]),
    );
    const state = (k: string) => {
      const i = keys.indexOf(k) * 3;
      return states[i] !== null
        ? 'r'
        : states[i + 2] !== null
          ? 'n'
          : states[i + 1] !== null
            ? 'w'
            : '';
    };
    const out: HeadJob[] = [];
    for (const [i, h] of turn.entries()) {
      const s = h.cache ? state(h.cache.key) : 'n';
      if (s === 'r') out.push(uncached(h, states[keys.indexOf(h.cache!.key) * 3] ?? ''));
      else if (s === 'n') out.push(h);
      else if (i > 0) break;
      else if (s === 'w' || !(await this.claim(h))) return { turn: [], waitMs: WAIT_FOR_WRITER_MS };
      else return { turn: [h] };
    }
    return { turn: out };
  }

  /** Claims the writing of a head's prefix; false when another job claimed it first. */
  private async claim(h: HeadJob): Promise<boolean> {
    const ok = await this.redis.set(this.key(h.cache!.key, 'w'), h.id, 'PX', WRITING_MS, 'NX');
    return ok === 'OK';
  }

  /**
   * A call with the prefix began to answer (its first token, or its whole answer): its usage
   * says whether the provider caches the prefix; readable from now for its lifetime (on the
   * call's deployment of a pool only), or never.
   */
  async answered(prefix: string, usage: CacheUsage, deployment = ''): Promise<void> {
    const cached = (usage.cache_creation_input_tokens ?? 0) + (usage.cache_read_input_tokens ?? 0);
    const m = this.redis.multi().del(this.key(prefix, 'w'));
    if (cached > 0) m.set(this.key(prefix, 'r'), deployment, 'PX', READABLE_MS);
    else m.set(this.key(prefix, 'n'), '1', 'PX', READABLE_MS);
    await m.exec();
  }

  /** The writer failed before its prefix could be read: another job may write it. */
  async failed(prefix: string, jobId: string): Promise<void> {
    const w = this.key(prefix, 'w');
    if ((await this.redis.get(w)) === jobId) await this.redis.del(w);
  }
}

/**
 * A job whose prefix is readable: its input less the prefix's share (at least 1 token); on
 * deployment `on` of a pool only, when one is named.
 */
function uncached(h: HeadJob, on: string): HeadJob {
  const inputTokens = Math.max(1, Math.ceil(h.cost.inputTokens * (1 - (h.cache?.share ?? 0))));
  const warm = on ? { warm: { on, fullCost: h.cost } } : {};
  return { ...h, cost: { ...h.cost, inputTokens }, ...warm };
}
