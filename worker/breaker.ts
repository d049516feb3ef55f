import { randomUUID } from 'node:crypto';
import { type BreakerReading, readBreaker } from '../shared/breaker-state.ts';
import { breakerKey, type QueueNames } from '../shared/keys.ts';
import { loadLuaScripts, runLua } from '../shared/lua-scripts.ts';
import type { RedisClient } from '../shared/redis.ts';

export type { BreakerState } from '../shared/breaker-state.ts';

const SCRIPTS = loadLuaScripts(new URL('./lua', import.meta.url).pathname);

/**
 * When the shared circuit breaker opens, and how long it stays open.
 * @inline
 */
export interface BreakerOptions {
  /** Consecutive provider failures that open it. @default 5 */
  readonly threshold?: number;
  /** How long it stays open before a trial call. @default 10_000 */
  readonly cooldownMs?: number;
  /** How long a trial call may take before another process may try. @default 60_000 */
  readonly trialTtlMs?: number;
  /**
   * How long this process trusts a "closed" answer before asking Redis again; a breaker that
   * another process opened is seen within this time. Saves a round trip per call. @default 200
   */
  readonly cacheMs?: number;
}

/** Whether a call may go out now (a trial call goes alone), or how long to wait. */
export type BreakerCheck = { allowed: true; trial: boolean } | { allowed: false; waitMs: number };

/** The circuit breaker shared by every worker of a queue (state in Redis, Redis time). */
export class CircuitBreaker {
  readonly holder = randomUUID();
  private readonly key: string;
  private readonly threshold: number;
  private readonly cooldownMs: number;
  private readonly trialTtlMs: number;
  private readonly cacheMs: number;
  /** Until when a closed answer with no failures may be reused (process clock, ms). */
  private closedUntil = 0;
  /** Whether Redis may hold failures or a non-closed state that a success must clear. */
  private dirty = true;

  constructor(
    private readonly redis: RedisClient,
    private readonly names: QueueNames,
    options: BreakerOptions = {},
    /** A pool's deployment: the breaker is that deployment's own. */
    readonly deployment?: string,
  ) {
    this.key = breakerKey(names, deployment);
    this.threshold = options.threshold ?? 5;
    this.cooldownMs = options.cooldownMs ?? 10_000;
    this.trialTtlMs = options.trialTtlMs ?? 60_000;
    this.cacheMs = options.cacheMs ?? 200;
  }

  private async op(
    op: 'check' | 'success' | 'failure' | 'abandon',
    threshold = this.threshold,
    via: RedisClient = this.redis,
  ): Promise<[number, number, number, number, number]> {
    const r = (await runLua(
      via,
      SCRIPTS['breaker']!,
      [this.key],
      ['', op, this.holder, threshold, this.cooldownMs, this.trialTtlMs],
    )) as unknown[];
    const at = (i: number) => Number(r[i] ?? 0);
    return [at(0), at(1), at(2), at(3), at(4)];
  }

  /** Whether a call may go out now: `{ allowed, trial }`, or how long to wait; `via`: a connection. */
  async check(via?: RedisClient): Promise<BreakerCheck> {
    if (Date.now() < this.closedUntil) return { allowed: true, trial: false };
    const [ok, n, failures] = await this.op('check', this.threshold, via);
    if (ok === 1 && n === 0) {
      this.dirty = failures > 0;
      if (!this.dirty) this.closedUntil = Date.now() + this.cacheMs;
    } else {
      this.dirty = true;
      this.closedUntil = 0;
    }
    return ok === 1 ? { allowed: true, trial: n === 1 } : { allowed: false, waitMs: n };
  }

  /** Records a success; a round trip only when Redis may hold failures to clear. */
  async success(): Promise<void> {
    if (!this.dirty) return;
    await this.op('success');
    this.dirty = false;
  }

  /** Gives up the trial call this process holds, if any (it is stopping). */
  async abandonTrial(): Promise<void> {
    await this.op('abandon');
  }

  /** Records a provider failure; true when it opened the breaker. */
  async failure(): Promise<boolean> {
    return (await this.recordFailure()).opened;
  }

  /**
   * Records a provider failure. `whileClosed` is true only when the breaker was closed before it
   * and still is: the provider looked healthy, so the failure is the job's own. A failure that
   * opened the breaker, a failed trial, or a call that was under way when another failure opened
   * it happened in an outage. `outageMs` is how long the breaker has not been closed, in all:
   * what a job's retryFor leaves out; `now` is Redis's time of the failure (ms), the clock of
   * both. `certain`: nothing answers at the provider's address; it opens the breaker at once.
   */
  async recordFailure(certain = false): Promise<{
    opened: boolean;
    whileClosed: boolean;
    outageMs: number;
    now: number;
  }> {
    this.closedUntil = 0;
    this.dirty = true;
    const [, opened, whileClosed, outageMs, now] = await this.op(
      'failure',
      certain ? 1 : this.threshold,
    );
    return { opened: opened === 1, whileClosed: whileClosed === 1, outageMs, now };
  }

  /** The breaker as the status and the dashboard show it (see {@link readBreaker}). */
  state(): Promise<BreakerReading> {
    return readBreaker(this.redis, this.names, this.deployment);
  }
}
