/**
 * What llmq's worker relies on inside BullMQ, in one place: its key layout (read by the peek,
 * front and reclaim scripts), its delayed score, the raw job a completion with `fetchNext`
 * returns, and its completion's own arguments (sent behind a reclaim). They are BullMQ's
 * internals, not its API: {@link assertBullmqVersion} refuses any other version.
 */
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { type Job, type JobsOptions, raw2NextJobData, Worker } from 'bullmq';
import { ConfigError } from '../shared/errors.ts';
import type { JobData, JobResult } from '../shared/job.ts';
import { finishedData } from '../shared/job-kept.ts';
import type { JobTicket } from '../shared/job-ticket.ts';
import {
  bullPrefix,
  depthSizesKey,
  fairJobsKey,
  fairServedKey,
  fairTenantsKey,
  type QueueNames,
} from '../shared/keys.ts';
import { limiterKeys } from '../shared/limiter/limiter-keys.ts';
import {
  defineLua,
  type LuaArg,
  type LuaScript,
  loadLuaScripts,
  luaScript,
  packLuaArg,
  queueLua,
  runLua,
  runLuaWith,
} from '../shared/lua-scripts.ts';
import { duplicateRedis, type RedisClient } from '../shared/redis.ts';
import { storedResultJson } from '../shared/result-codec.ts';
import { bullmqTelemetry } from '../shared/telemetry/tracing.ts';
import { type HeadJob, headOf } from './head-job.ts';

const SCRIPTS = loadLuaScripts(new URL('./lua', import.meta.url).pathname);

/** The job at the head of the queue: see head-job.ts (re-exported for the gate's older imports). */
export { type HeadJob, headOf } from './head-job.ts';

/**
 * Writes a corrected ticket into an active job's options, as BullMQ stores them
 * (lua/ticket-2.lua); false when `token` no longer holds its lock or its options changed.
 */
export async function writeTicket(
  redis: RedisClient,
  names: QueueNames,
  job: { readonly id: string; readonly token: string },
  ticket: JobTicket,
): Promise<boolean> {
  const key = `${bullPrefix(names)}:${names.queue}:${job.id}`;
  const read = await redis.hget(key, 'opts');
  if (read === null) return false;
  const opts = JSON.stringify({ ...(JSON.parse(read) as object), llmq: ticket });
  const keys = [key, `${key}:lock`];
  return (await runLua(redis, SCRIPTS['ticket']!, keys, [job.token, read, opts])) === 1;
}

/** BullMQ's delayed score: due time (ms) · 2^12 + a counter. */
const DELAYED_SHIFT = 0x1000;
/** Tenants read from fair share's index beyond one per job wanted. */
const FAIR_EXTRA_TENANTS = 8;
/** Due delayed jobs looked at per peek (BullMQ promotes up to 1000 at once). */
const DUE_SCAN = 100;

/**
 * Peeks at the next job without taking it. BullMQ's `moveToActive` first promotes the delayed
 * jobs that are due (into the prioritized set, behind the jobs of their priority already
 * there), then takes from the plain wait list, then from the prioritized set. llmq gives every
 * job a priority, so the wait list only holds jobs that BullMQ itself moved back (stalled).
 *
 * Delayed jobs matter: a retried job waits in the delayed set, and only a `moveToActive` call
 * promotes it; a gate that saw only wait and prioritized would never pull it when nothing else
 * is waiting. A paused or maxed queue has no head: BullMQ would hand out nothing, and a gate that
 * reserved budget for it would reserve and release in a tight loop.
 */
export class HeadPeeker {
  private readonly base: string;
  private readonly names: QueueNames;
  constructor(
    private readonly redis: RedisClient,
    names: QueueNames,
    private readonly clock: () => number = Date.now,
  ) {
    this.base = `${bullPrefix(names)}:${names.queue}`;
    this.names = names;
  }

  /**
   * The next `n` jobs at most, in the order BullMQ hands them out (due delayed jobs where their
   * promotion will put them); fewer when the queue holds fewer, and only the first when more
   * delayed jobs are due than one peek looks at. With `perTenant` (fair share), only the first
   * that many jobs of each tenant, of the first job's priority, among the `n` and, behind them,
   * the first jobs of the tenants furthest behind (fair share's index).
   */
  async peekMany(n: number, perTenant = 0): Promise<HeadJob[]> {
    const want = Math.max(1, Math.floor(n));
    // BullMQ stamps and promotes delayed jobs with the worker's clock, not Redis's.
    const dueScore = (this.clock() + 1) * DELAYED_SHIFT - 1;
    const b = this.base;
    const reply = (await runLua(
      this.redis,
      SCRIPTS['peek']!,
      [
        ...[`${b}:wait`, `${b}:prioritized`, `${b}:delayed`, `${b}:meta`, `${b}:active`],
        ...[`${b}:pc`, fairTenantsKey(this.names), fairServedKey(this.names)],
      ],
      [
        `${b}:`,
        dueScore,
        DUE_SCAN,
        want,
        perTenant > 0 ? 'tenants' : '',
        Math.max(1, Math.floor(perTenant)),
        fairJobsKey(this.names),
        // A few tenants more than the jobs wanted: the index's order is the charges' as of now.
        want + FAIR_EXTRA_TENANTS,
      ],
    )) as string[] | null;
    const heads: HeadJob[] = [];
    for (let i = 0; reply && i + 2 < reply.length; i += 3) {
      heads.push(headOf(reply[i]!, reply[i + 1]!, reply[i + 2] || undefined));
    }
    return heads;
  }

  /**
   * Moves waiting jobs to where BullMQ takes its next job from, in this order, so the next
   * moveToActive calls hand out exactly these; resolves with the ids still waiting (moved).
   * Each names the reservation admitted for it: only the admitted go.
   */
  async moveToFront(jobs: readonly FrontJob[]): Promise<string[]> {
    if (jobs.length === 0) return [];
    const b = this.base;
    const res = limiterKeys(this.names).res;
    const f = frontCall({ wait: `${b}:wait`, prioritized: `${b}:prioritized`, res }, jobs);
    return (await runLua(this.redis, FRONT, f.keys, f.args)) as string[];
  }
}

/** A job to move to the front, and the reservation admitted for it ('': none, see front-3.lua). */
export interface FrontJob {
  readonly id: string;
  readonly reservation: string;
}

/** lua/front-3.lua: puts admitted jobs where BullMQ's moveToActive takes its next job from. */
export const FRONT: LuaScript = SCRIPTS['front']!;

/** The keys and arguments of lua/front-3.lua: BullMQ's wait and prioritized, the limiter's res. */
export function frontCall(
  k: { readonly wait: string; readonly prioritized: string; readonly res: string },
  jobs: readonly FrontJob[],
): { keys: string[]; args: string[] } {
  return { keys: [k.wait, k.prioritized, k.res], args: jobs.flatMap((j) => [j.reservation, j.id]) };
}

/** The one BullMQ version this module was written against and tested with (package.json pins it). */
export const BULLMQ_WRITTEN_FOR = '6.7.0';

/** The installed bullmq's version, from its package.json. */
export function installedBullmqVersion(): string {
  return (createRequire(import.meta.url)('bullmq/package.json') as { version: string }).version;
}

/** Throws unless `version` (the installed bullmq's by default) is the one this module was written for. */
export function assertBullmqVersion(version: string = installedBullmqVersion()): void {
  if (version === BULLMQ_WRITTEN_FOR) return;
  throw new ConfigError(
    `bullmq ${version} is installed, but llmq's worker reads BullMQ ${BULLMQ_WRITTEN_FOR}'s keys ` +
      `and scripts (worker/bullmq-internals.ts): install bullmq ${BULLMQ_WRITTEN_FOR} ` +
      `(npm install bullmq@${BULLMQ_WRITTEN_FOR})`,
  );
}

/**
 * BullMQ's marker key, `<prefix>:<queue>:marker`: a sorted set its scripts write when a job
 * becomes ready (see marker-wait.ts).
 */
export function markerKey(names: QueueNames): string {
  return `${bullPrefix(names)}:${names.queue}:marker`;
}

/** The folder of BullMQ's compiled scripts (`<name>-<keys>.js`, each exporting its Lua). */
export function bullmqScriptsDir(): string {
  const pkg = createRequire(import.meta.url).resolve('bullmq/package.json');
  return join(dirname(pkg), 'dist/esm/scripts');
}

/**
 * BullMQ's worker, opened up for one thing its own run loop does: a job's completion that brings
 * the next job back in the same command (`moveToCompleted` with `fetchNext`) is turned into a
 * job the way `getNextJob` turns one.
 */
export class GateWorker extends Worker<JobData, JobResult> {
  /** What the queue's finished jobs may hold (set by {@link openGateWorker}). */
  resultBounds: ResultBounds = DEFAULT_RESULT_BOUNDS;
  /** The queue's names (set by {@link openGateWorker}). */
  names: QueueNames = { prefix: '', queue: '' };

  /**
   * Forgets what was kept per waiting job (the depth bound's sizes, fair share's index entries)
   * for jobs this worker moved to active (lua/leftWaiting-2.lua): they no longer wait.
   */
  async leftWaiting(jobs: readonly Job<JobData, JobResult>[]): Promise<void> {
    if (jobs.length === 0) return;
    const call = this.leftWaitingCall(
      jobs.map((j) => ({ id: j.id ?? '', tenant: j.data?.tenant })),
    );
    await runLua(this.opts.connection as RedisClient, LEFT_WAITING, call.keys, call.args);
  }

  /**
   * The keys and arguments of lua/leftWaiting-2.lua for jobs that may have left waiting: those
   * still waiting (not locked) keep their entries, so a take may send it in its transaction.
   */
  leftWaitingCall(jobs: readonly { readonly id: string; readonly tenant?: string | undefined }[]): {
    keys: string[];
    args: string[];
  } {
    return {
      keys: [depthSizesKey(this.names), fairTenantsKey(this.names)],
      args: [
        depthSizesKey(this.names, ''),
        fairJobsKey(this.names),
        String(this.keys['']),
        ...jobs.flatMap((j) => [j.id, j.tenant ?? '']),
      ],
    };
  }

  async jobFrom(raw: unknown, token: string): Promise<Job<JobData, JobResult> | undefined> {
    if (!Array.isArray(raw) || !raw[0]) return undefined;
    return this.nextJobFromJobData(raw[0], raw[1] as string, token);
  }

  /** Moves the next job to active under `token` without blocking; undefined when none. */
  nextJob(token: string): Promise<Job<JobData, JobResult> | undefined> {
    return this.getNextJob(token, { block: false }) as Promise<Job<JobData, JobResult> | undefined>;
  }

  /**
   * Completes a job under `token`, letting its request go ({@link completeJob}); with
   * `fetchNext`, resolves with the next job's raw data for {@link jobFrom}.
   */
  complete(
    job: Job<JobData, JobResult>,
    result: JobResult,
    token: string,
    fetchNext: boolean,
  ): Promise<unknown> {
    return completeJob(
      this.opts.connection as RedisClient,
      job,
      result,
      token,
      fetchNext,
      this.resultBounds,
    );
  }

  /** The keys of BullMQ's `moveToActive`, in its order. */
  get moveToActiveKeys(): string[] {
    const k = this.keys;
    return [
      ...[k.wait, k.active, k.prioritized, k.events, k.stalled, k.limiter, k.delayed, k.paused],
      ...[k.meta, k.pc, k.marker],
    ].map(String);
  }

  /** The arguments of BullMQ's `moveToActive` for `token`, as its worker sends them. */
  moveToActiveArgs(token: string): LuaArg[] {
    const o = this.opts;
    const opts = { token, lockDuration: o.lockDuration, limiter: o.limiter, name: o.name };
    return [String(this.keys['']), Date.now(), packLuaArg(opts)];
  }

  /**
   * Stores a successful job's result after its lock lapsed (lua/reclaim-7.lua, then BullMQ's own
   * moveToFinished with the arguments its completion sends, then lua/keepRecord-6.lua, in one
   * transaction): when no other worker took the job, it takes the lock back under `token` and
   * completes it.
   */
  async completeLate(
    job: Job<JobData, JobResult>,
    result: JobResult,
    token: string,
  ): Promise<LateCompletion> {
    const redis = this.opts.connection as RedisClient;
    const id = job.id ?? '';
    const k = this.keys;
    const reclaimKeys = [this.toKey(id), `${this.toKey(id)}:lock`, k.active, k.wait];
    const keys = [...reclaimKeys, k.prioritized, k.delayed, k.events].map(String);
    const completion = completionOf(job, result, token, false);
    const keep = keepRecordOf(job, 'completed', job.data, completion.resultJson, this.resultBounds);
    let finished: unknown;
    const holder = await runLuaWith(
      redis,
      SCRIPTS['reclaim']!,
      keys,
      [id, token, this.opts.lockDuration ?? 30_000],
      {
        prepare: (conn) => {
          defineLua(conn, MOVE_TO_FINISHED, completion.keys);
          defineLua(conn, KEEP_RECORD, keep.keys);
        },
        queue: (tx) => {
          queueLua(tx, MOVE_TO_FINISHED, completion.keys, completion.args);
          queueLua(tx, KEEP_RECORD, keep.keys, keep.args);
        },
        took: (replies) => {
          finished = replies instanceof Error ? replies : replies[0];
        },
      },
    );
    if (finished instanceof Error) throw finished;
    if (typeof finished === 'number' && finished < 0)
      return { stored: false, holder: typeof holder === 'string' ? holder : null };
    completed(job, result, completion.finishedOn);
    return { stored: true };
  }

  /** A job from moveToActive's raw reply, as the worker's own fetch makes it. */
  fromActive(raw: unknown, token: string): Promise<Job<JobData, JobResult> | undefined> {
    const [data, id] = raw2NextJobData(raw as unknown[]);
    return this.nextJobFromJobData(data, id, token) as Promise<Job<JobData, JobResult> | undefined>;
  }
}

/** BullMQ's own script `name` (`moveToActive-11`), to run in llmq's transactions. */
function bullmqScript(file: string, name: string): LuaScript {
  const s = createRequire(import.meta.url)(`bullmq/dist/cjs/scripts/${file}.js`)[name] as {
    content: string;
    keys: number;
  };
  return luaScript('bullmq', name, s.keys, s.content);
}

/** BullMQ's own moveToActive script, run by llmq inside the gate's transaction. */
export const MOVE_TO_ACTIVE: LuaScript = bullmqScript('moveToActive-11', 'moveToActive');

/** BullMQ's own moveToFinished script, run by llmq's completions (`completeJob`, `completeLate`). */
const MOVE_TO_FINISHED: LuaScript = bullmqScript('moveToFinished-14', 'moveToFinished');

/** lua/leftWaiting-2.lua: what was kept per waiting job goes as the job leaves waiting. */
export const LEFT_WAITING: LuaScript = SCRIPTS['leftWaiting']!;

/** lua/keepRecord-6.lua: a finished job lets its request go, and keeps its result. */
const KEEP_RECORD: LuaScript = SCRIPTS['keepRecord']!;

/** BullMQ's side of a job, as its own methods reach it. */
interface JobInternals {
  readonly queue: {
    toKey(type: string): string;
    readonly keys: Record<string, string>;
    readonly opts: { readonly prefix?: string };
  };
  readonly backend: { moveToCompletedArgs: CompletedArgs; finishedErrors: FinishedErrors };
  finishedOn?: number;
}

/**
 * BullMQ's moveToFinished keys and ARGV for a job's completion, as its `moveToCompleted` sends
 * them, but with no result (null) when the job is kept: keepRecord writes it into the job, so
 * that BullMQ's `completed` event (its stream holds the last 10,000) does not carry a second
 * copy. A job removed on completion has only the event, and a flow's child gives its result to
 * its parent (`getChildrenValues`): theirs go to BullMQ whole.
 */
function completionOf(
  job: Job<JobData, JobResult>,
  result: JobResult,
  token: string,
  fetchNext: boolean,
): { keys: string[]; args: LuaArg[]; finishedOn: number; resultJson: string } {
  const json = JSON.stringify(result);
  const kept = keptOnCompletion(job.opts.removeOnComplete);
  const resultJson = kept ? storedResultJson(json) : '';
  const raw = (job as unknown as JobInternals).backend.moveToCompletedArgs(
    job,
    kept && !job.parentKey ? 'null' : json,
    job.opts.removeOnComplete,
    token,
    fetchNext,
  );
  const n = MOVE_TO_FINISHED.numberOfKeys;
  const finishedOn = Number(raw[n + 1]);
  const args = raw
    .filter((a) => a !== undefined)
    .map((a) => (typeof a === 'boolean' ? Number(a) : a)) as LuaArg[];
  return { keys: args.slice(0, n).map(String), args: args.slice(n), finishedOn, resultJson };
}

/**
 * Whether BullMQ keeps a job once completed, as its moveToFinished reads `removeOnComplete`:
 * `true`, a count of 0 or an age of 0 remove it at once.
 */
export function keptOnCompletion(remove: JobsOptions['removeOnComplete']): boolean {
  if (remove === undefined || remove === false) return true;
  if (remove === true) return false;
  if (typeof remove === 'number') return remove !== 0;
  const age = 'age' in remove ? remove.age : undefined;
  return remove.count !== 0 && (age === undefined || age > 0);
}

/**
 * What finished jobs may hold; 0 leaves the bound off. Their age and count are the producer's
 * `keepCompletedS` and `keepCompletedCount` (BullMQ's removeOnComplete).
 * @inline
 */
export interface ResultBounds {
  /** Bytes of the finished jobs' records and results; the oldest over it go. @default 512mb */
  readonly maxBytes: number;
}

export const DEFAULT_RESULT_BOUNDS: ResultBounds = { maxBytes: 512 * 1024 ** 2 };

/** lua/keepRecord-6.lua's keys and arguments for a job: the record it keeps once finished. */
function keepRecordOf(
  job: Job<JobData, JobResult>,
  finished: 'completed' | 'failed',
  data: JobData,
  resultJson: string,
  bounds: ResultBounds,
): { keys: string[]; args: LuaArg[] } {
  const q = (job as unknown as JobInternals).queue;
  const id = job.id ?? '';
  const record = JSON.stringify(finishedData(data));
  const llmq = (part: string) => `${q.opts.prefix}:${part}`;
  return {
    keys: [
      q.toKey(id),
      String(q.keys[finished]),
      llmq('finished:sizes'),
      llmq('finished:order'),
      llmq('finished:bytes'),
      llmq('metrics'),
    ],
    args: [
      id,
      record,
      Buffer.byteLength(record) + Buffer.byteLength(resultJson),
      bounds.maxBytes,
      String(q.keys['']),
      resultJson,
    ],
  };
}

/**
 * Lets a dead-lettered job's request go once it is in failed (its dead letter holds the
 * request, to be retried from). Resolves with whether it did.
 */
export async function keepFailedRecord(
  redis: RedisClient,
  job: Job<JobData, JobResult>,
  data: JobData,
  bounds: ResultBounds = DEFAULT_RESULT_BOUNDS,
): Promise<boolean> {
  const keep = keepRecordOf(job, 'failed', data, '', bounds);
  return (await runLua(redis, KEEP_RECORD, keep.keys, keep.args)) === 1;
}

/** What BullMQ's `moveToCompleted` sets on the job object once it stored the result. */
function completed(job: Job<JobData, JobResult>, result: JobResult, finishedOn: number): void {
  job.returnvalue = result;
  (job as unknown as JobInternals).finishedOn = finishedOn;
  job.attemptsMade += 1;
}

/**
 * Completes a job as BullMQ's `job.moveToCompleted` does (its own moveToFinished script, with
 * the arguments it sends) and, in the same transaction, lets its request go
 * (lua/keepRecord-6.lua): a completed job keeps its result and its request's record, never its
 * request. Resolves with the next job's raw data when `fetchNext` fetched one (for
 * {@link GateWorker.jobFrom}); throws BullMQ's own error (with its `code`) when refused.
 */
export async function completeJob(
  redis: RedisClient,
  job: Job<JobData, JobResult>,
  result: JobResult,
  token: string,
  fetchNext: boolean,
  bounds: ResultBounds = DEFAULT_RESULT_BOUNDS,
): Promise<unknown> {
  const completion = completionOf(job, result, token, fetchNext);
  const keep = keepRecordOf(job, 'completed', job.data, completion.resultJson, bounds);
  const reply = await runLuaWith(redis, MOVE_TO_FINISHED, completion.keys, completion.args, {
    prepare: (conn) => defineLua(conn, KEEP_RECORD, keep.keys),
    queue: (tx) => queueLua(tx, KEEP_RECORD, keep.keys, keep.args),
    took: () => {},
  });
  if (typeof reply === 'number' && reply < 0) {
    const errors = (job as unknown as JobInternals).backend;
    throw errors.finishedErrors({
      code: reply,
      jobId: job.id,
      command: 'moveToFinished',
      state: 'active',
    });
  }
  completed(job, result, completion.finishedOn);
  return Array.isArray(reply) ? raw2NextJobData(reply) : undefined;
}

/** BullMQ's error for a refused finish (its `code` kept on the error). */
type FinishedErrors = (e: {
  code: number;
  jobId: string | undefined;
  command: string;
  state: string;
}) => Error;

/** BullMQ's builder of its completion's arguments (its 14 keys, then its ARGV). */
type CompletedArgs = (
  job: Job<JobData, JobResult>,
  returnvalue: string,
  removeOnComplete: unknown,
  token: string,
  fetchNext?: boolean,
) => (string | number | boolean | Buffer | undefined)[];

/**
 * What a late completion found: the result stored, or not (another worker holds the job's lock:
 * `holder`, its token; or the job is finished or gone: null).
 */
export type LateCompletion =
  | { readonly stored: true }
  | { readonly stored: false; readonly holder: string | null };

/** The cap around the gate's fetches (see lua/cap-3.lua). */
export const CAP = SCRIPTS['cap']!;

/** BullMQ's worker for llmq's gate: no processor, no run loop of its own (the gate pulls). */
export function openGateWorker(
  redis: RedisClient,
  names: QueueNames,
  options: { lockDuration: number; stalledInterval: number; maxStalledCount: number },
  resultBounds: ResultBounds = DEFAULT_RESULT_BOUNDS,
): GateWorker {
  assertBullmqVersion();
  const worker = new GateWorker(names.queue, null, {
    connection: duplicateRedis(redis),
    prefix: bullPrefix(names),
    autorun: false,
    ...bullmqTelemetry(),
    ...options,
  });
  worker.resultBounds = resultBounds;
  worker.names = names;
  return worker;
}
