import type { Redis } from 'ioredis';
import { Unpackr } from 'msgpackr';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packLuaArg } from '../shared/lua-scripts.ts';
import { newRedis } from './helpers.ts';

/** Unpacks what Lua echoes, then sends back what Lua computed with the numbers it read. */
const ECHO = `
local a = cmsgpack.unpack(ARGV[1])
return cmsgpack.pack({ echo = a, sum = a.now + a.window, half = a.now / 2, neg = a.minus * 3,
  text = tostring(a.now) .. '|' .. tostring(a.tokens) .. '|' .. tostring(a.minus) })
`;
const unpackr = new Unpackr({ useRecords: false, int64AsType: 'number' });

let redis: Redis;
beforeAll(() => {
  redis = newRedis();
});
afterAll(() => {
  redis.disconnect();
});

describe("the limiter scripts' structured argument", () => {
  it('reaches Lua with ms timestamps, token counts, fractions and negatives exact', async () => {
    const value = {
      now: 1_812_345_678_901,
      window: 60_050,
      tokens: 4_000_000_123,
      big: 2 ** 53 - 1,
      headroom: 0.01,
      minus: -1,
      minusBig: -3_000_000_000,
      ticket: 'd6f1c2c0-5e1a-4c55-9d27-0b4e8f0a1b2c',
      queue: true,
      tryOnce: false,
      list: [{ id: 'a', req: 1, inp: 0, out: 4096 }],
      empty: [],
      limits: { req: 50, in: 30_000, out: 8_000, tok: 0 },
    };
    const reply = (await redis.callBuffer('EVAL', ECHO, '0', packLuaArg(value))) as Buffer;
    const back = unpackr.unpack(reply) as Record<string, unknown>;
    expect(back['echo']).toEqual(value);
    expect(back['sum']).toBe(1_812_345_738_951);
    expect(back['half']).toBe(906_172_839_450.5);
    expect(back['neg']).toBe(-3);
    // What a script writes to Redis from these numbers is their plain decimal form.
    expect(back['text']).toBe('1812345678901|4000000123|-1');
  });

  it('leaves out a field that is undefined, so Lua reads it as absent (nil)', async () => {
    const lua = `local a = cmsgpack.unpack(ARGV[1]) return { a.now == nil and 1 or 0, a.id }`;
    expect(await redis.call('EVAL', lua, '0', packLuaArg({ now: undefined, id: 'x' }))).toEqual([
      1,
      'x',
    ]);
  });
});
