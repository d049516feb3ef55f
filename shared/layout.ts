/**
 * The layout stamp: a hash of everything two builds must share to run side by side on one
 * queue, the text of every Lua script and the keys llmq builds. It changes by itself whenever a
 * script or the key layout changes (no number to bump). Workers register under it; a worker of
 * another stamp refuses to start beside live ones.
 */

import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { JobFormatError, LayoutMismatchError } from './errors.ts';
import { JOB_FORMAT } from './job.ts';
import {
  batchesKey,
  batchQueueName,
  breakerKey,
  bullPrefix,
  deadLetterQueueName,
  historyKey,
  jobEventsKey,
  llmqKey,
  type QueueNames,
  queueRegistryKey,
  queueStampKey,
  workersKey,
} from './keys.ts';
import { limiterKeys, wakeChannel } from './limiter/limiter-keys.ts';
import { loadLuaScripts, runLua } from './lua-scripts.ts';
import type { RedisClient } from './redis.ts';
import { VERSION } from './version.ts';

/** The folders of Lua scripts, from the package's root (the same under dist/). */
const LUA_DIRS = ['shared/lua', 'shared/limiter/lua', 'producer/lua', 'worker/lua'];
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const SCRIPTS = loadLuaScripts(fileURLToPath(new URL('./lua', import.meta.url)));

/** Every key llmq builds, for sample names: what the key layout is, as the code defines it. */
function keyLayout(): string[] {
  const n: QueueNames = { prefix: 'P', queue: 'Q' };
  return [
    bullPrefix(n),
    deadLetterQueueName('Q'),
    batchQueueName('Q'),
    queueRegistryKey('P'),
    breakerKey(n),
    llmqKey(n, 'x'),
    jobEventsKey(n, 'J'),
    historyKey(n, 'H'),
    queueStampKey(n),
    workersKey(n),
    wakeChannel(n),
    ...(['inflight', 'handoffs', 'totals', 'lease'] as const).map((p) => batchesKey(n, p)),
    ...Object.entries(limiterKeys(n)).map(([k, v]) => `${k}=${v}`),
  ];
}

/** The text of every `.lua` file under `dir`, includes too, by path. */
function luaFiles(dir: string, under = dir): [string, string][] {
  const out: [string, string][] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, e.name);
    if (e.isDirectory()) out.push(...luaFiles(path, under));
    else if (e.name.endsWith('.lua'))
      out.push([path.slice(under.length), readFileSync(path, 'utf8')]);
  }
  return out;
}

/**
 * The layout stamp of the build at `root` (the package's root, or dist/): 16 hex digits of a
 * sha256 of its Lua scripts and its key layout.
 */
export function layoutStamp(root = ROOT): string {
  const hash = createHash('sha256');
  for (const dir of LUA_DIRS) {
    const files = luaFiles(join(root, dir)).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    for (const [path, text] of files) hash.update(`${dir}${path}\n${text}\n`);
  }
  hash.update(keyLayout().join('\n'));
  return hash.digest('hex').slice(0, 16);
}

export interface FleetLayoutOptions {
  readonly redis: RedisClient;
  readonly names: QueueNames;
  /** The worker registering. */
  readonly workerId: string;
  /** @default this build's {@link layoutStamp} */
  readonly stamp?: string;
  /** How long the entry outlives a worker that stops renewing it. @default 30_000 */
  readonly leaseMs?: number;
}

/**
 * Stamps the queue with the job format this build writes (and its version), once per producer:
 * a worker of a build that cannot read that format refuses the queue.
 */
export async function stampQueue(redis: RedisClient, names: QueueNames): Promise<void> {
  await runLua(redis, SCRIPTS['stampFormat']!, [queueStampKey(names)], [JOB_FORMAT, VERSION]);
}

/**
 * A worker's entry in the fleet of its queue, under its build's stamp, renewed while it runs.
 * {@link FleetLayout.claim} throws {@link LayoutMismatchError} when workers of another stamp are
 * alive.
 */
export class FleetLayout {
  private timer: NodeJS.Timeout | undefined;

  private constructor(
    private readonly o: FleetLayoutOptions,
    readonly stamp: string,
    private readonly leaseMs: number,
  ) {}

  static async claim(options: FleetLayoutOptions): Promise<FleetLayout> {
    const layout = new FleetLayout(
      options,
      options.stamp ?? layoutStamp(),
      options.leaseMs ?? 30_000,
    );
    await layout.register();
    layout.timer = setInterval(
      () => void layout.register(true).catch(() => {}),
      layout.leaseMs / 3,
    );
    layout.timer.unref();
    return layout;
  }

  /** Drops the entry: a worker of another build may start once no entry of this one is left. */
  async release(): Promise<void> {
    clearInterval(this.timer);
    const key = llmqKey(this.o.names, 'fleet', 'layout');
    await this.o.redis.zrem(key, `${this.stamp}:${this.o.workerId}`).catch(() => {});
  }

  /** Registers (checking the queue is this build's) or, with `renew`, only renews the entry. */
  private async register(renew = false): Promise<void> {
    const { redis, names, workerId } = this.o;
    const keys = [llmqKey(names, 'fleet', 'layout'), workersKey(names), queueStampKey(names)];
    const args = [this.stamp, workerId, this.leaseMs, JOB_FORMAT, VERSION, renew ? 'renew' : ''];
    const reply = (await runLua(redis, SCRIPTS['claimLayout']!, keys, args)) as number[];
    const queue = names.queue;
    if (reply[0] === 1) {
      const [, stamp, workers, leftMs] = reply as [number, string, number, number];
      throw new LayoutMismatchError(queue, this.stamp, { stamp, workers, leftMs });
    }
    if (reply[0] === 2) {
      const [, workers, leftMs] = reply as [number, number, number];
      const stamp = 'none: a build from before the layout stamp';
      throw new LayoutMismatchError(queue, this.stamp, { stamp, workers, leftMs });
    }
    if (reply[0] === 3) throw new JobFormatError(queue, Number(reply[1]), JOB_FORMAT);
  }
}
