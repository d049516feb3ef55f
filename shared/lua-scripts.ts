import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import type { ChainableCommander } from 'ioredis';
import { Packr } from 'msgpackr';
import type { RedisClient } from './redis.ts';

/**
 * Lua scripts live in `.lua` files named `<name>-<numberOfKeys>.lua`, each opening with a
 * header that lists its KEYS, ARGV and output. `--- @include "x"` pulls in `includes/x.lua`.
 * They are registered with `defineCommand` under a name that carries a hash of the script's
 * text, so two builds of llmq on one Redis never run each other's scripts, whatever version
 * number they carry.
 */
export interface LuaScript {
  readonly name: string;
  readonly numberOfKeys: number;
  readonly lua: string;
  /** The command name registered on a connection, e.g. `llmq_limiter_acquire_3f2a9c01d4`. */
  readonly command: string;
}

const INCLUDE = /^--- @include "([\w-]+)"\s*$/gm;

/** Loads every script of a folder of `.lua` files, resolving includes. */
export function loadLuaScripts(dir: string): Record<string, LuaScript> {
  const out: Record<string, LuaScript> = {};
  for (const file of readdirSync(dir)) {
    const m = /^([A-Za-z]+)-(\d+)\.lua$/.exec(file);
    if (!m) continue;
    const [, name, keys] = m as unknown as [string, string, string];
    const lua = readFileSync(join(dir, file), 'utf8').replace(INCLUDE, (_, inc: string) =>
      readFileSync(join(dir, 'includes', `${inc}.lua`), 'utf8'),
    );
    // Named after the folder that holds `lua/` (limiter, worker, producer), so scripts of
    // different parts may share a name.
    out[name] = luaScript(basename(dirname(dir)), name, Number(keys), lua);
  }
  return out;
}

/** A script of `part`, its command named after its text. */
export function luaScript(
  part: string,
  name: string,
  numberOfKeys: number,
  lua: string,
): LuaScript {
  const sha = createHash('sha1').update(lua).digest('hex').slice(0, 10);
  return { name, numberOfKeys, lua, command: `llmq_${part}_${name}_${sha}` };
}

/**
 * Runs a script that only reads as EVALSHA_RO (EVAL_RO the first time on a connection's
 * server): Redis refuses any write it would make, so a reader can never change what it reads.
 */
export async function runLuaReadOnly(
  redis: RedisClient,
  script: LuaScript,
  keys: readonly string[],
  args: readonly LuaArg[],
): Promise<unknown> {
  const sha = createHash('sha1').update(script.lua).digest('hex');
  try {
    return await redis.call('EVALSHA_RO', sha, keys.length, ...keys, ...args);
  } catch (err) {
    if (!String((err as Error).message).startsWith('NOSCRIPT')) throw err;
    return redis.call('EVAL_RO', script.lua, keys.length, ...keys, ...args);
  }
}

/** Plain msgpack maps for Lua's `cmsgpack.unpack` (BullMQ packs its options alike); `undefined` as nil. */
const packr = new Packr({ useRecords: false, encodeUndefinedAsNil: true });

/** Packs a structured script argument as msgpack. */
export function packLuaArg(value: unknown): Buffer {
  return packr.pack(value);
}

/** Lua's 64-bit integers (`cmsgpack.pack`) as numbers, not BigInts. */
const unpackr = new Packr({ useRecords: false, int64AsType: 'number' });

/** A value a script stored with `cmsgpack.pack`. */
export function unpackLuaValue(packed: Buffer): unknown {
  return unpackr.unpack(packed);
}

/** A script argument; a Buffer goes as is (msgpack, see {@link packLuaArg}). */
export type LuaArg = string | number | Buffer;

type ScriptRunner = (...args: LuaArg[]) => Promise<unknown>;

/**
 * Runs a script on a connection, defining it there on first use (ioredis then sends EVALSHA
 * and falls back to EVAL when Redis does not know the script yet).
 */
export function runLua(
  redis: RedisClient,
  script: LuaScript,
  keys: readonly string[],
  args: readonly LuaArg[],
): Promise<unknown> {
  defineLua(redis, script, keys);
  const commands = redis as unknown as Record<string, ScriptRunner>;
  return (commands[script.command] as ScriptRunner).call(redis, ...keys, ...args);
}

/** Defines a script on a connection (once), so it and transactions opened after may run it. */
export function defineLua(redis: RedisClient, script: LuaScript, keys: readonly string[]): void {
  const commands = redis as unknown as Record<string, ScriptRunner | undefined>;
  if (typeof commands[script.command] !== 'function') {
    redis.defineCommand(script.command, { numberOfKeys: script.numberOfKeys, lua: script.lua });
  }
  if (keys.length !== script.numberOfKeys) {
    throw new Error(`script ${script.name} takes ${script.numberOfKeys} keys, got ${keys.length}`);
  }
}

/** Queues a script on a transaction of `redis` (defined there with {@link defineLua} first). */
export function queueLua(
  tx: ChainableCommander,
  script: LuaScript,
  keys: readonly string[],
  args: readonly LuaArg[],
): void {
  (tx as unknown as Record<string, (...a: LuaArg[]) => unknown>)[script.command]!(...keys, ...args);
}

/** Commands sent behind a script in one transaction with it: one round trip for both. */
export interface Behind {
  /** Readies its scripts on the connection, before the transaction opens. */
  prepare(redis: RedisClient): void;
  queue(tx: ChainableCommander): void;
  /** Its commands' replies in order (an error as its Error), or the error that lost them all. */
  took(replies: readonly unknown[] | Error): void;
}

/** Runs a script, then `behind`'s commands, in one MULTI; resolves with the script's reply. */
export async function runLuaWith(
  redis: RedisClient,
  script: LuaScript,
  keys: readonly string[],
  args: readonly LuaArg[],
  behind: Behind,
): Promise<unknown> {
  defineLua(redis, script, keys);
  behind.prepare(redis);
  const tx = redis.multi();
  queueLua(tx, script, keys, args);
  behind.queue(tx);
  let replies: [Error | null, unknown][];
  try {
    replies = (await tx.exec()) ?? [];
  } catch (err) {
    behind.took(err as Error);
    throw err;
  }
  behind.took(replies.slice(1).map(([e, r]) => e ?? r));
  const [err, reply] = replies[0] ?? [new Error(`no reply from ${script.name}`)];
  if (err) throw err;
  return reply;
}
