import { setTimeout as sleep } from 'node:timers/promises';
import { formatBytes, QueueFullError, RequestValidationError } from '../shared/errors.ts';
import {
  depthSizesKey,
  fairJobsKey,
  fairServedKey,
  fairTenantsKey,
  llmqKey,
  type QueueNames,
} from '../shared/keys.ts';
import { loadLuaScripts, runLua } from '../shared/lua-scripts.ts';
import type { LlmqQueue } from '../shared/queues.ts';
import type { RedisClient } from '../shared/redis.ts';

const SCRIPTS = loadLuaScripts(new URL('./lua', import.meta.url).pathname);

export interface DepthGateOptions {
  readonly redis: RedisClient;
  readonly names: QueueNames;
  /** The queue whose waiting jobs are counted (its BullMQ keys). */
  readonly queue: LlmqQueue;
  /** Waiting jobs allowed in the queue; 0 for no bound. @default 0 */
  readonly maxDepth?: number;
  /**
   * Waiting jobs allowed per tenant: a number for every tenant, or a bound per tenant name
   * (`'*'` for the others); 0 or absent for no bound. Meant for modest bounds (thousands): the
   * tenant's set is pruned, one member at a time, when it looks full.
   */
  readonly tenantMaxDepth?: number | Readonly<Record<string, number>>;
  /**
   * Bytes of waiting jobs' data allowed in the queue (Config.maxDepthBytes); 0 for no bound.
   * @default 0
   */
  readonly maxDepthBytes?: number;
  /** Bytes of waiting jobs' data allowed per tenant, as {@link tenantMaxDepth}. */
  readonly tenantMaxBytes?: number | Readonly<Record<string, number>>;
  /** How long a reservation lives if its producer dies before adding. @default 30_000 */
  readonly reservationTtlMs?: number;
  /** The retry hint a full queue answers with. @default 1_000 */
  readonly retryAfterMs?: number;
  /**
   * Runs each of the gate's Redis calls: the producer passes its one mapping of connection
   * failures and deadlines to RedisUnavailableError. @default runs the call as is
   */
  readonly call?: <T>(op: () => Promise<T>) => Promise<T>;
}

export type ReserveOutcome =
  /** `existing[i]` is true when the i-th job exists already (nothing was reserved for it). */
  | { readonly ok: true; readonly existing: readonly boolean[] }
  | { readonly ok: false; readonly full: QueueFullError }
  /** The jobs' bytes are more than a bytes bound: they could never be added. */
  | { readonly ok: false; readonly never: RequestValidationError }
  /** Another producer is adding this id right now. */
  | { readonly ok: false; readonly pending: string };

export interface WaitForRoomOptions {
  /** Wait until there is room instead of throwing {@link QueueFullError}. @default false */
  readonly wait?: boolean;
  /** With `wait`, give up after this many ms with the last QueueFullError. @default Infinity */
  readonly waitTimeoutMs?: number;
  readonly signal?: AbortSignal | undefined;
}

/**
 * Keeps the queue's depth (and each tenant's) under its bound, under any number of producers in
 * any number of processes: reserve (one Lua script: count and reserve at once), add, release.
 * See `lua/reserveDepth-9.lua` for what counts as waiting.
 */
export class DepthGate {
  readonly maxDepth: number;
  readonly maxDepthBytes: number;
  private readonly tenantMaxBytes: number | Readonly<Record<string, number>>;
  private readonly redis: RedisClient;
  private readonly names: QueueNames;
  private readonly queue: LlmqQueue;
  private readonly tenantMaxDepth: number | Readonly<Record<string, number>>;
  private readonly ttlMs: number;
  private readonly retryAfterMs: number;
  private readonly call: <T>(op: () => Promise<T>) => Promise<T>;

  constructor(options: DepthGateOptions) {
    this.redis = options.redis;
    this.names = options.names;
    this.queue = options.queue;
    this.maxDepth = options.maxDepth ?? 0;
    this.tenantMaxDepth = options.tenantMaxDepth ?? 0;
    this.maxDepthBytes = options.maxDepthBytes ?? 0;
    this.tenantMaxBytes = options.tenantMaxBytes ?? 0;
    this.ttlMs = options.reservationTtlMs ?? 30_000;
    this.retryAfterMs = options.retryAfterMs ?? 1_000;
    this.call = options.call ?? ((op) => op());
    checkBound('maxDepth', this.maxDepth);
    checkBound('maxDepthBytes', this.maxDepthBytes);
    checkBounds('tenantMaxDepth', this.tenantMaxDepth);
    checkBounds('tenantMaxBytes', this.tenantMaxBytes);
    if (!Number.isInteger(this.ttlMs) || this.ttlMs < 1_000) {
      throw new TypeError(
        `reservationTtlMs must be a whole number of ms from 1000 up, got ${this.ttlMs}`,
      );
    }
  }

  /** The bound of a tenant's waiting jobs; 0 when unbounded. */
  tenantBound(tenant: string | undefined): number {
    return boundOf(this.tenantMaxDepth, tenant);
  }

  /** The bytes of each job's data, when a bytes bound applies to the tenant; else none. */
  weigh(datas: readonly unknown[], tenant: string | undefined): number[] {
    if (this.maxDepthBytes === 0 && boundOf(this.tenantMaxBytes, tenant) === 0) return [];
    return datas.map(jobBytes);
  }

  /** The most jobs one reservation may take (a chunk larger than a bound could never fit). */
  largestChunk(tenant: string | undefined): number {
    const bounds = [this.maxDepth, this.tenantBound(tenant)].filter((n) => n > 0);
    return bounds.length > 0 ? Math.min(...bounds) : Number.POSITIVE_INFINITY;
  }

  /**
   * Tries once to reserve room for `ids` (all or none); `bytes[i]` is the size of the i-th
   * job's data (see {@link jobBytes}), counted against the bytes bounds.
   */
  async reserve(
    ids: readonly string[],
    tenant: string | undefined,
    bytes: readonly number[] = [],
  ): Promise<ReserveOutcome> {
    const k = this.queue.keys;
    const tenantBound = this.tenantBound(tenant);
    const reply = (await this.call(() =>
      runLua(
        this.redis,
        SCRIPTS['reserveDepth']!,
        [
          k['prioritized']!,
          k['wait']!,
          k['paused']!,
          k['delayed']!,
          this.reservationsKey(),
          this.tenantKey(tenant),
          this.sizesKey(),
          this.tenantSizesKey(tenant),
          llmqKey(this.names, 'dead', 'bytes'),
        ],
        [
          this.maxDepth,
          tenantBound,
          this.ttlMs,
          `${k['']}`,
          this.maxDepthBytes,
          boundOf(this.tenantMaxBytes, tenant),
          tenant ?? '',
          ...ids.flatMap((id, i) => [id, bytes[i] ?? 0]),
        ],
      ),
    )) as [number, string | number, number?, number?];
    const full = (who: string, unit: 'jobs' | 'bytes') => ({
      ok: false as const,
      full: new QueueFullError(
        who,
        Number(reply[1]),
        Number(reply[2]),
        this.retryAfterMs,
        unit,
        Number(reply[3] ?? 0),
      ),
    });
    const queue = `queue "${this.names.queue}"`;
    const ofTenant = `tenant "${tenant}" of ${queue}`;
    switch (reply[0]) {
      case 0:
        return { ok: true, existing: [...String(reply[1])].map((c) => c === '1') };
      case 1:
        return full(queue, 'jobs');
      case 2:
        return full(ofTenant, 'jobs');
      case 4:
        return full(queue, 'bytes');
      case 5:
        return full(ofTenant, 'bytes');
      case 6:
      case 7:
        return { ok: false, never: neverFits(reply[0] === 6 ? queue : ofTenant, reply) };
      case 3:
        return { ok: false, pending: String(reply[1]) };
      default:
        throw new Error(`reserveDepth answered ${JSON.stringify(reply)}`);
    }
  }

  /**
   * Reserves room for `ids`, all or none: throws {@link QueueFullError} when full, or with
   * `wait` sleeps (backoff with jitter, up to the retry hint) until there is room. Waits briefly
   * when another producer is adding one of the same ids, then sees it as existing.
   */
  async reserveOrWait(
    ids: readonly string[],
    tenant: string | undefined,
    options: WaitForRoomOptions = {},
    bytes: readonly number[] = [],
  ): Promise<readonly boolean[]> {
    const started = Date.now();
    const waitTimeoutMs = options.waitTimeoutMs ?? Number.POSITIVE_INFINITY;
    let fullDelay = 25;
    let pendingSince: number | undefined;
    for (;;) {
      options.signal?.throwIfAborted();
      const outcome = await this.reserve(ids, tenant, bytes);
      if (outcome.ok) return outcome.existing;
      if ('never' in outcome) throw outcome.never;
      let delay: number;
      if ('pending' in outcome) {
        pendingSince ??= Date.now();
        // A reservation lives at most ttl; past that the other producer is gone.
        if (Date.now() - pendingSince > this.ttlMs + 1_000)
          throw new Error(`job ${outcome.pending} stays reserved`);
        delay = 10 + Math.random() * 20;
      } else {
        if (!options.wait) throw outcome.full;
        const left = waitTimeoutMs - (Date.now() - started);
        if (left <= 0) throw outcome.full;
        fullDelay = Math.min(fullDelay * 1.6, this.retryAfterMs);
        delay = Math.min(left, fullDelay / 2 + (Math.random() * fullDelay) / 2);
      }
      await sleep(delay, undefined, options.signal ? { signal: options.signal } : undefined);
    }
  }

  /**
   * Drops the reservations of `ids` once they were added, and indexes them for fair share;
   * with `added` false (the add failed) their counts in the tenant's set and the sizes go too.
   */
  async release(ids: readonly string[], tenant: string | undefined, added = true): Promise<void> {
    if (ids.length === 0) return;
    await this.call(() =>
      runLua(
        this.redis,
        SCRIPTS['releaseDepth']!,
        [
          this.reservationsKey(),
          this.tenantKey(tenant),
          this.sizesKey(),
          this.tenantSizesKey(tenant),
          this.queue.keys['prioritized']!,
          fairJobsKey(this.names, tenant ?? ''),
          fairTenantsKey(this.names),
          fairServedKey(this.names),
        ],
        [added ? '1' : '0', tenant ?? '', ...ids],
      ),
    );
  }

  /**
   * Takes a job out of the waiting states atomically, so that no worker can start it, and notes
   * it as a cancel under way; true when it was waiting. The caller removes its data after
   * (BullMQ's remove), then {@link cancelled}; {@link strandedCancels} lists the notes whose
   * remove never came.
   */
  async takeWaiting(id: string): Promise<boolean> {
    const k = this.queue.keys;
    const taken = await this.call(() =>
      runLua(
        this.redis,
        SCRIPTS['takeWaiting']!,
        [
          ...[k['prioritized']!, k['wait']!, k['paused']!, k['delayed']!, this.cancellingKey()],
          this.sizesKey(),
          `${k['']}${id}`,
        ],
        [id, depthSizesKey(this.names, '')],
      ),
    );
    return Number(taken) === 1;
  }

  /** Drops the note of a cancel whose job was removed. */
  async cancelled(id: string): Promise<void> {
    await this.call(() => this.redis.zrem(this.cancellingKey(), id));
  }

  /** Jobs taken out at least `olderThanMs` ago whose remove has not come (at most `limit`). */
  async strandedCancels(olderThanMs: number, limit = 100): Promise<string[]> {
    return this.call(async () => {
      const [s, us] = await this.redis.time();
      const now = Number(s) * 1000 + Math.floor(Number(us) / 1000);
      return this.redis.zrangebyscore(
        this.cancellingKey(),
        0,
        now - olderThanMs,
        'LIMIT',
        0,
        limit,
      );
    });
  }

  /** Waiting jobs now, as the bound counts them (reservations included). */
  async depth(): Promise<number> {
    const k = this.queue.keys;
    const r = await this.call(() =>
      this.redis
        .multi()
        .zcard(k['prioritized']!)
        .llen(k['wait']!)
        .llen(k['paused']!)
        .zcard(k['delayed']!)
        .zcard(this.reservationsKey())
        .exec(),
    );
    return (r ?? []).reduce((sum, [, n]) => sum + Number(n ?? 0), 0);
  }

  private cancellingKey(): string {
    return llmqKey(this.names, 'cancelling');
  }

  private reservationsKey(): string {
    return llmqKey(this.names, 'depth', 'reservations');
  }

  private sizesKey(): string {
    return depthSizesKey(this.names);
  }

  private tenantSizesKey(tenant: string | undefined): string {
    return depthSizesKey(this.names, tenant ?? '');
  }

  private tenantKey(tenant: string | undefined): string {
    return llmqKey(this.names, 'depth', 'tenant', tenant ?? '');
  }
}

function checkBound(name: string, n: number): void {
  if (!Number.isInteger(n) || n < 0)
    throw new TypeError(`${name} must be a whole number from 0 (unbounded) up, got ${n}`);
}

function checkBounds(name: string, b: number | Readonly<Record<string, number>>): void {
  if (typeof b === 'number') checkBound(name, b);
  else for (const [t, n] of Object.entries(b)) checkBound(`${name}.${t}`, n);
}

/** A tenant's bound of a per-tenant setting (`'*'` for the others); 0 when unbounded. */
function boundOf(b: number | Readonly<Record<string, number>>, tenant: string | undefined): number {
  if (tenant === undefined) return 0;
  if (typeof b === 'number') return b;
  return b[tenant] ?? b['*'] ?? 0;
}

/** What a job weighs against the bytes bounds: its data as BullMQ stores it (JSON, UTF-8). */
export function jobBytes(data: unknown): number {
  return Buffer.byteLength(JSON.stringify(data), 'utf8');
}

function neverFits(what: string, reply: readonly unknown[]): RequestValidationError {
  return new RequestValidationError([
    {
      field: '(body)',
      message: `is ${formatBytes(Number(reply[1]))}, more than ${what} holds at once (${formatBytes(Number(reply[2]))} of waiting requests): send a smaller request or raise the bound (LLMQ_MAX_DEPTH_BYTES, or max-bytes in the keys file)`,
    },
  ]);
}

/** The Lua scripts of the producer, for the test that loads every script. */
export const PRODUCER_SCRIPTS = SCRIPTS;
