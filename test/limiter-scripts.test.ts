import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bullPrefix } from '../shared/keys.ts';
import { Limiter } from '../shared/limiter/limiter.ts';
import { loadLuaScripts } from '../shared/lua-scripts.ts';
import { newRedis, testNames } from './helpers.ts';

/** Every folder of Lua scripts in llmq: the limiter's, the worker's, the producer's. */
const DIRS = ['../shared/limiter/lua', '../worker/lua', '../producer/lua', '../shared/lua'].map(
  (d) => fileURLToPath(new URL(d, import.meta.url)),
);
const DIR = DIRS[0]!;
const files = readdirSync(DIR).filter((f) => f.endsWith('.lua'));
const allFiles = DIRS.flatMap((dir) =>
  readdirSync(dir)
    .filter((f) => f.endsWith('.lua'))
    .map((f) => [dir.split('/').slice(-2).join('/'), dir, f] as const),
);

/** CRC16/XMODEM, as Redis Cluster hashes keys. */
function crc16(s: string): number {
  let crc = 0;
  for (const byte of Buffer.from(s)) {
    crc ^= byte << 8;
    for (let i = 0; i < 8; i++)
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

/** The cluster slot of a key: the hash of its first non-empty `{…}`, else of the whole key. */
function slotOf(key: string): number {
  const open = key.indexOf('{');
  const close = open >= 0 ? key.indexOf('}', open + 1) : -1;
  const tag = close > open + 1 ? key.slice(open + 1, close) : key;
  return crc16(tag) % 16_384;
}

let redis: Redis;
beforeAll(() => {
  redis = newRedis();
});
afterAll(() => {
  redis.disconnect();
});

describe('every Lua script of llmq', () => {
  it.each(allFiles)(
    '%s/%s… opens with a KEYS/ARGV/Output header and compiles on Redis',
    async (_label, dir, file) => {
      const text = readFileSync(join(dir, file), 'utf8');
      expect(file).toMatch(/^[A-Za-z]+-\d+\.lua$/);
      expect(text.startsWith('--[[')).toBe(true);
      const header = text.slice(0, text.indexOf(']]'));
      expect(header).toMatch(/Output/);
      const listed = [...header.matchAll(/^\s*KEYS\[(\d+)\]/gm)].map((m) => Number(m[1]));
      const numberOfKeys = Number(/-(\d+)\.lua$/.exec(file)?.[1]);
      expect(listed).toEqual(Array.from({ length: numberOfKeys }, (_, i) => i + 1));
      const script = loadLuaScripts(dir)[file.replace(/-\d+\.lua$/, '')]!;
      expect(await redis.script('LOAD', script.lua)).toMatch(/^[0-9a-f]{40}$/);
    },
  );

  it('registers each under a distinct command name carrying a hash of its text', () => {
    const commands = DIRS.flatMap((d) => Object.values(loadLuaScripts(d)).map((s) => s.command));
    expect(new Set(commands).size).toBe(commands.length);
    for (const c of commands)
      expect(c).toMatch(/^llmq_(limiter|worker|producer|shared)_\w+_[0-9a-f]{10}$/);
  });
});

describe('the limiter scripts', () => {
  it('are all named <name>-<keys>.lua, so none is skipped', () => {
    expect(files.length).toBeGreaterThan(0);
    for (const f of files) expect(f).toMatch(/^[A-Za-z]+-\d+\.lua$/);
    expect(Object.keys(loadLuaScripts(DIR)).sort()).toEqual(
      files.map((f) => f.replace(/-\d+\.lua$/, '')).sort(),
    );
  });

  it.each(files)(
    '%s opens with a header listing each of its KEYS, its ARGV and its output',
    (file) => {
      const text = readFileSync(join(DIR, file), 'utf8');
      expect(text.startsWith('--[[')).toBe(true);
      const header = text.slice(0, text.indexOf(']]'));
      expect(header).toMatch(/ARGV\[1\]|no ARGV/);
      expect(header).toMatch(/Output/);
      const listed = [...header.matchAll(/^\s*KEYS\[(\d+)\]/gm)].map((m) => Number(m[1]));
      const numberOfKeys = Number(/-(\d+)\.lua$/.exec(file)?.[1]);
      expect(listed).toEqual(Array.from({ length: numberOfKeys }, (_, i) => i + 1));
    },
  );

  it.each(files)('%s compiles on Redis (SCRIPT LOAD), its includes resolved', async (file) => {
    const script = loadLuaScripts(DIR)[file.replace(/-\d+\.lua$/, '')]!;
    expect(script.lua).not.toMatch(/--- @include/);
    const sha = await redis.script('LOAD', script.lua);
    expect(sha).toMatch(/^[0-9a-f]{40}$/);
  });

  it('keeps every key of a limiter in one cluster slot, the slot of its queue', () => {
    const names = testNames('limkeys');
    const lim = new Limiter({ redis, names });
    const tags = lim.allKeys.map((k) => /\{[^}]+\}/.exec(k)?.[0]);
    expect(new Set(tags)).toEqual(new Set([`{${names.queue}}`]));
    const queueSlot = slotOf(`${bullPrefix(names)}:${names.queue}:wait`);
    for (const key of lim.allKeys) expect(slotOf(key)).toBe(queueSlot);
    // The hash itself, checked against Redis's documented example.
    expect(crc16('123456789')).toBe(0x31c3);
  });
});
