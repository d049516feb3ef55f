import { createHash } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { loadLuaScripts } from '../../shared/lua-scripts.ts';
import { bullmqScriptsDir } from '../../worker/bullmq-internals.ts';

/** Redis commands a process sent, by name (scripts by their own name), and its round trips. */
export interface CommandCounts {
  readonly commands: Record<string, number>;
  /** Standalone commands plus pipelines/transactions (one round trip each). */
  readonly roundTrips: number;
}

const sha1 = (text: string) => createHash('sha1').update(text).digest('hex');

/** How much of a script's text names it in SLOWLOG, which keeps 128 characters of an argument. */
const TEXT_KEPT = 100;

/** The key of an EVAL's script text in {@link scriptNames}'s map (SLOWLOG keeps its start). */
export const scriptTextKey = (text: string) => `text:${text.slice(0, TEXT_KEPT)}`;

/**
 * sha → script name for llmq's scripts and BullMQ's, so EVALSHA shows as `evalsha:acquire`;
 * and {@link scriptTextKey} of each text → its name, for an EVAL.
 */
export async function scriptNames(): Promise<Map<string, string>> {
  const names = new Map<string, string>();
  const add = (text: string, name: string) => {
    names.set(sha1(text), name);
    names.set(scriptTextKey(text), name);
  };
  const root = new URL('../../', import.meta.url).pathname;
  for (const dir of ['shared/lua', 'shared/limiter/lua', 'worker/lua', 'producer/lua']) {
    try {
      for (const s of Object.values(loadLuaScripts(join(root, dir)))) add(s.lua, `llmq:${s.name}`);
    } catch {
      // A folder another engineer moved: its scripts just show by sha.
    }
  }
  const bullScripts = bullmqScriptsDir();
  for (const file of readdirSync(bullScripts)) {
    if (!/^[A-Za-z]+-\d+\.js$/.test(file)) continue;
    const mod = (await import(join(bullScripts, file))) as Record<
      string,
      { name: string; content: string }
    >;
    for (const s of Object.values(mod)) if (s?.content) add(s.content, `bullmq:${s.name}`);
  }
  return names;
}

/**
 * Counts every command every ioredis connection of this process sends, from now on, by patching
 * `Redis.prototype.sendCommand` (pipelines and MULTI go through it too). For the bench and tests.
 */
export async function countRedisCommands(): Promise<{
  snapshot(): CommandCounts;
  reset(): void;
  /** Stops counting: `sendCommand` is what it was. */
  restore(): void;
}> {
  const names = await scriptNames();
  let commands: Record<string, number> = {};
  let roundTrips = 0;
  let pipelineOpen = false;
  const proto = Redis.prototype as unknown as {
    sendCommand: (cmd: { name: string; args: unknown[] }, stream?: unknown) => unknown;
  };
  const original = proto.sendCommand;
  proto.sendCommand = function (this: unknown, cmd, stream) {
    let name = cmd.name.toLowerCase();
    if (name === 'evalsha' || name === 'eval') {
      const sha = name === 'eval' ? sha1(String(cmd.args[0])) : String(cmd.args[0]);
      name = `evalsha:${names.get(sha) ?? sha.slice(0, 8)}`;
    }
    commands[name] = (commands[name] ?? 0) + 1;
    if (stream === undefined) roundTrips++;
    else if (!pipelineOpen) {
      // A pipeline writes all its commands in one go, with the stream given.
      pipelineOpen = true;
      roundTrips++;
      queueMicrotask(() => {
        pipelineOpen = false;
      });
    }
    return original.call(this, cmd, stream);
  };
  return {
    snapshot: () => ({ commands: { ...commands }, roundTrips }),
    reset: () => {
      commands = {};
      roundTrips = 0;
    },
    restore: () => {
      proto.sendCommand = original;
    },
  };
}
