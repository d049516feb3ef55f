import type { Redis } from 'ioredis';
import { beforeEach, describe, expect, it } from 'vitest';
import type { QueueNames } from '../shared/keys.ts';
import type { Limiter, LimiterOptions } from '../shared/limiter/limiter.ts';
import type { Reservation } from '../shared/limiter/types.ts';
import { eachTestRedis, testLimiter } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
let t: number;
const T0 = 1_700_000_000_000;

eachTestRedis('limprobe', (r, n) => {
  redis = r;
  names = n;
});
beforeEach(() => {
  t = T0;
});

const W = 10_000;
const make = (o: Partial<LimiterOptions> = {}) =>
  testLimiter({
    redis,
    names,
    windowMs: W,
    clock: () => t,
    maxPollMs: 5,
    limits: { tokens: 1_000 },
    ...o,
  });
const cost = (tokens: number) => ({
  requests: 1,
  inputTokens: tokens / 2,
  outputTokens: tokens / 2,
});

const tokenHeaders = (remaining: number, resetAt: number): Record<string, string> => ({
  'anthropic-ratelimit-tokens-limit': '1000',
  'anthropic-ratelimit-tokens-remaining': String(remaining),
  'anthropic-ratelimit-tokens-reset': new Date(resetAt).toISOString(),
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * The window full to the brim: 600 of ours (leaving at T0 + W) and, from T0 + 5 s, 300 of
 * another client's that the provider reported (held until T0 + 14 s); or, not `reported`, 900
 * of ours. A worker then waits in
 * line for `each` (200) with two more calls like it behind it; it is denied for budget until
 * ours leaves.
 */
async function waitBesideAnotherClient(
  lim: Limiter,
  {
    reported = true,
    each = 200,
    signal,
  }: { reported?: boolean; each?: number; signal?: AbortSignal } = {},
): Promise<{ admitted: Promise<Reservation[]> }> {
  // Without the other client, ours fills the window alone.
  const ours = reported ? 600 : 900;
  const d = await lim.tryAcquire(cost(ours));
  if (!d.ok) throw new Error(`expected admission, got ${JSON.stringify(d)}`);
  await lim.settle(d.reservation, { inputTokens: ours / 2, outputTokens: ours / 2 });
  t += 5_000;
  if (reported) await lim.observe(tokenHeaders(100, T0 + 14_000));
  let denied = 0;
  const admitted = lim.acquireMany(cost(each), {
    more: [cost(each), cost(each)],
    ...(signal ? { signal } : {}),
    onDenied: () => {
      denied++;
    },
  });
  while (denied === 0) await sleep(5);
  return { admitted };
}

/** Two readings of another client's spend, 200 then 400 (a rise of 200: one of its calls). */
async function seeTheOtherClientRise(lim: Limiter): Promise<void> {
  await lim.observe(tokenHeaders(800, T0 + 9_000));
  t += 1_000;
  await lim.observe(tokenHeaders(600, T0 + 9_000));
}

describe('probes: room that comes back beside another client’s spend', () => {
  it('admits the first waiter alone, and nobody else until its reading arrives', async () => {
    const lim = make();
    const { admitted } = await waitBesideAnotherClient(lim);
    t = T0 + W + 1;
    // Room for 700 came back; 300 of it is counted as the other client's. The waiter goes alone,
    // though its two followers would fit.
    const [probe, ...rest] = await admitted;
    expect(rest).toEqual([]);
    expect((await lim.snapshot()).counters.probes).toBe(1);
    // Everyone else waits for the probe's reading, however much room seems free.
    const held = await lim.tryAcquire(cost(100));
    expect(held).toMatchObject({ ok: false, reason: 'probe' });
    if (!held.ok) expect(held.waitMs).toBe(W / 10);
    expect((await lim.snapshot()).probeUntil).toBe(T0 + W + 1 + W / 10);
    // Its response begins; its reading: the other client took 100 more of the room meanwhile
    // (400 of theirs).
    await lim.start(probe!);
    await lim.observe(tokenHeaders(400, T0 + 14_000), 'global', probe);
    expect(await lim.tryAcquire(cost(100))).toMatchObject({ ok: true });
    expect((await lim.snapshot()).probeUntil).toBeNull();
    // What the reading told is counted, and room for another call like the one it saw (100)
    // stays free: ours 200 + 300, theirs 400, and 100 left for them.
    expect(await lim.tryAcquire(cost(100))).toMatchObject({ ok: true });
    expect(await lim.tryAcquire(cost(100))).toMatchObject({ ok: true });
    expect(await lim.tryAcquire(cost(100))).toMatchObject({ ok: false, reason: 'budget' });
  });

  it('a reading of another call does not end the wait; the probe’s call ending does', async () => {
    const lim = make();
    const { admitted } = await waitBesideAnotherClient(lim);
    t = T0 + W + 1;
    const [probe] = await admitted;
    // Another call's reading (the same 300 of the other client's, and the probe's 200).
    await lim.observe(tokenHeaders(500, T0 + 14_000));
    expect(await lim.tryAcquire(cost(100))).toMatchObject({ ok: false, reason: 'probe' });
    // Its call failed without a reading, say: it is kept, and the others may go.
    await lim.keep(probe!);
    expect((await lim.snapshot()).probeUntil).toBeNull();
    expect(await lim.tryAcquire(cost(100))).toMatchObject({ ok: true });
  });

  it('the wait lasts probeMs at most', async () => {
    const lim = make({ probeMs: 300 });
    const { admitted } = await waitBesideAnotherClient(lim);
    t = T0 + W + 1;
    await admitted;
    t += 299;
    expect(await lim.tryAcquire(cost(100))).toMatchObject({
      ok: false,
      reason: 'probe',
      waitMs: 1,
    });
    t += 1;
    expect(await lim.tryAcquire(cost(100))).toMatchObject({ ok: true });
  });

  it('a waiter held by a probe is woken by its reading', async () => {
    const lim = make();
    const { admitted } = await waitBesideAnotherClient(lim);
    t = T0 + W + 1;
    const [probe] = await admitted;
    // Another process's waiter, which hears settles and readings and polls seldom.
    const subscriber = redis.duplicate();
    const other = make({ subscriber, maxPollMs: 5_000 });
    try {
      let admittedAt = 0;
      const next = other.acquire(cost(100)).then(() => {
        admittedAt = performance.now();
      });
      await sleep(100);
      expect(admittedAt).toBe(0);
      const readAt = performance.now();
      await lim.start(probe!);
      await lim.observe(tokenHeaders(300, T0 + 14_000), 'global', probe);
      await next;
      // Woken at the reading, not at the end of the wait it was told (1 s).
      expect(admittedAt - readAt).toBeLessThan(500);
    } finally {
      await other.close();
      subscriber.disconnect();
    }
  });

  it('a waiter that gave up leaves no probe behind it once a window has passed', async () => {
    const lim = make();
    const stop = new AbortController();
    const { admitted } = await waitBesideAnotherClient(lim, { signal: stop.signal });
    stop.abort();
    await expect(admitted).rejects.toThrow();
    // A window later the other client is reported again, and a new waiter goes unhindered.
    t = T0 + 5_000 + W + 1;
    await lim.observe(tokenHeaders(700, T0 + 22_000));
    const all = await lim.acquireMany(cost(200), { more: [cost(200), cost(200)] });
    expect(all).toHaveLength(3);
    expect((await lim.snapshot()).counters.probes).toBe(0);
  });

  it('backfills nothing beside another client’s spend; the head’s room goes to a probe', async () => {
    const backfilled: number[] = [];
    const run = async (lim: Limiter, reported: boolean) => {
      // 600 + 300 of the other client's (or 900 of ours) leave 100: the head's 400 waits, and
      // the 50 behind it fits now.
      const ours = reported ? 600 : 900;
      const d = await lim.tryAcquire(cost(ours));
      if (!d.ok) throw new Error('expected admission');
      await lim.settle(d.reservation, { inputTokens: ours / 2, outputTokens: ours / 2 });
      t += 5_000;
      if (reported) await lim.observe(tokenHeaders(100, T0 + 14_000));
      const stop = new AbortController();
      let denied = 0;
      const waiting = lim.acquireMany(cost(400), {
        more: [cost(50)],
        backfill: 1,
        onBackfill: async (rs) => {
          backfilled.push(rs.length);
        },
        onDenied: () => {
          denied++;
        },
        signal: stop.signal,
      });
      while (denied === 0) await sleep(5);
      stop.abort();
      await expect(waiting).rejects.toThrow();
    };
    await run(make(), true);
    expect(backfilled).toEqual([]);
    names = { ...names, queue: `${names.queue}x` };
    t = T0;
    await run(make(), false);
    expect(backfilled).toEqual([1]);
  });

  it('keeps the probe due when room for only one call came back, for the room that follows', async () => {
    const lim = make();
    for (const [tokens, at] of [
      [200, T0],
      [400, T0 + 100],
    ] as const) {
      t = at;
      const d = await lim.tryAcquire(cost(tokens));
      if (!d.ok) throw new Error(`expected admission, got ${JSON.stringify(d)}`);
      await lim.settle(d.reservation, { inputTokens: tokens / 2, outputTokens: tokens / 2 });
    }
    // Another client's 300 beside our 600; a worker waits for 200, two more behind it.
    t = T0 + 5_000;
    await lim.observe(tokenHeaders(100, T0 + 14_000));
    let denied = 0;
    const first = lim.acquireMany(cost(200), {
      more: [cost(200), cost(200)],
      onDenied: () => {
        denied++;
      },
    });
    while (denied === 0) await sleep(5);
    // Our 200 leaves: room for the waiter alone, which goes as a plain call.
    t = T0 + W + 1;
    expect(await first).toHaveLength(1);
    expect((await lim.snapshot()).counters.probes).toBe(0);
    // Our 400 leaves 100 ms later: that room goes to a probe, not to a round at once.
    t = T0 + W + 101;
    const [probe, ...rest] = await lim.acquireMany(cost(200), { more: [cost(200)] });
    expect(probe).toBeDefined();
    expect(rest).toEqual([]);
    expect((await lim.snapshot()).counters.probes).toBe(1);
  });

  it('leaves room for one of the other client’s calls while its spend is counted', async () => {
    const lim = make();
    await seeTheOtherClientRise(lim);
    // 600 of room: ten calls of 50 would fit, but only eight go, leaving 200 for its next
    // call, which often lands while ours are on their way: then both fit.
    const round = await lim.acquireMany(cost(50), {
      more: Array.from({ length: 9 }, () => cost(50)),
    });
    expect(round).toHaveLength(8);
    expect(await lim.tryAcquire(cost(50))).toMatchObject({ ok: false, reason: 'budget' });
    // Its call came: the reading shows it, and the room kept for it is its.
    for (const r of round) await lim.start(r);
    await lim.observe(tokenHeaders(200, T0 + 9_000), 'global', round[0]);
    expect(await lim.tryAcquire(cost(50))).toMatchObject({ ok: false, reason: 'budget' });
    // Once its spend is no longer counted (its reset passed), the whole window is ours again.
    t = T0 + 9_001;
    for (const r of round) await lim.settle(r, { inputTokens: 25, outputTokens: 25 });
    t = T0 + W + 1_000;
    const after = await lim.acquireMany(cost(50), {
      more: Array.from({ length: 19 }, () => cost(50)),
    });
    expect(after.length).toBeGreaterThanOrEqual(11);
  });

  it('takes the whole room beside another client when probes are off', async () => {
    const lim = make({ probeMs: 0 });
    await seeTheOtherClientRise(lim);
    const round = await lim.acquireMany(cost(50), {
      more: Array.from({ length: 11 }, () => cost(50)),
    });
    expect(round).toHaveLength(12);
  });

  it('refuses a probe wait that is not a whole number of ms from 0 up', () => {
    expect(() => make({ probeMs: -1 })).toThrow(
      'probeMs must be a whole number of ms from 0 up, got -1',
    );
    expect(() => make({ probeMs: 1.5 })).toThrow(TypeError);
  });

  it('no probe without another client’s spend reported', async () => {
    const lim = make();
    const { admitted } = await waitBesideAnotherClient(lim, { reported: false });
    t = T0 + W + 1;
    // The waiter and both followers go at once.
    expect(await admitted).toHaveLength(3);
    expect((await lim.snapshot()).counters.probes).toBe(0);
  });

  it('no probe with probeMs 0', async () => {
    const lim = make({ probeMs: 0 });
    const { admitted } = await waitBesideAnotherClient(lim);
    t = T0 + W + 1;
    // 700 of room once ours leaves: the waiter and both followers, at once.
    expect(await admitted).toHaveLength(3);
    expect(await lim.tryAcquire(cost(100))).toMatchObject({ ok: true });
  });

  it('no probe when the room is for the waiter alone: nothing else would be spent', async () => {
    const lim = make();
    const { admitted } = await waitBesideAnotherClient(lim, { each: 400 });
    t = T0 + W + 1;
    // 700 of room: the waiter's 400 fits, another 400 would not.
    expect(await admitted).toHaveLength(1);
    expect((await lim.snapshot()).counters.probes).toBe(0);
    expect(await lim.tryAcquire(cost(300))).toMatchObject({ ok: true });
  });
});
