import { afterEach, describe, expect, it } from 'vitest';
import { countRedisCommands } from '../scripts/bench/command-counter.ts';
import { MAX_PER_ACQUIRE } from '../shared/limiter/limiter.ts';
import {
  acquireMany,
  callCost,
  eachTestLimiter,
  nextTurn,
  rateHeaders,
  settle,
  start,
  testLimiter,
} from './helpers.ts';

const bed = eachTestLimiter('batch');

/** Counts the commands sent from where a test starts it; restored after each test. */
let counter: Awaited<ReturnType<typeof countRedisCommands>> | undefined;
afterEach(() => {
  counter?.restore();
  counter = undefined;
});
const sent = (name: string) => counter?.snapshot().commands[`evalsha:llmq:${name}`] ?? 0;

const make = bed.make;
const cost = callCost;

describe('acquireMany: the jobs behind the head in one round trip', () => {
  it('admits those behind in order while they fit, and stops at the first that does not', async () => {
    const lim = make({ limits: { tokens: 1_000 } });
    const got = await acquireMany(lim, cost(100, 100), {
      more: [cost(100, 100), cost(100, 100), cost(300, 300), cost(10, 10)],
    });
    // 200 + 200 + 200 = 600; the fourth (600) would make 1,200; the fifth is not tried.
    expect(got.map((r) => r.cost.inputTokens + r.cost.outputTokens)).toEqual([200, 200, 200]);
    expect(new Set(got.map((r) => r.id)).size).toBe(3);
    const snap = await lim.snapshot();
    expect(snap.inFlight).toBe(3);
    expect(snap.scopes.find((s) => s.scope === 'global')?.dimensions.tokens.used).toBe(600);
    // What the extras reserved is real: the window has 400 left, not 1,000.
    const next = await lim.tryAcquire(cost(250, 250));
    expect(next).toMatchObject({ ok: false, reason: 'budget' });
  });

  it('fills a window exactly in one acquire that writes as it goes: each counted once', async () => {
    // 30 of 20 tokens fit in 600; the acquire writes its admissions every few, mid-round.
    const lim = make({ limits: { tokens: 600 }, admitBudgetMs: 60_000 });
    const more = Array.from({ length: 39 }, () => cost(10, 10));
    expect(await acquireMany(lim, cost(10, 10), { more })).toHaveLength(30);
    const snap = await lim.snapshot();
    expect(snap.scopes.find((s) => s.scope === 'global')?.dimensions.tokens.used).toBe(600);
    expect(await lim.tryAcquire(cost(1, 0))).toMatchObject({ ok: false, reason: 'budget' });
  });

  it('admits at most MAX_PER_ACQUIRE in one acquire: the rest in the next, none lost', async () => {
    // A time budget no acquire reaches: only the count stops it.
    const lim = make({ limits: { tokens: 1_000_000 }, admitBudgetMs: 60_000 });
    const more = Array.from({ length: MAX_PER_ACQUIRE + 10 }, () => cost(10, 10));
    const first = await acquireMany(lim, cost(10, 10), { more });
    expect(first).toHaveLength(MAX_PER_ACQUIRE);
    const rest = more.slice(MAX_PER_ACQUIRE - 1);
    const second = await acquireMany(lim, rest[0]!, { more: rest.slice(1) });
    expect(second).toHaveLength(11);
    expect((await lim.snapshot()).inFlight).toBe(MAX_PER_ACQUIRE + 11);
  });

  it('admits no one behind its call past its time budget: the rest in the next, none lost', async () => {
    const lim = make({ limits: { tokens: 1_000_000 }, admitBudgetMs: 0 });
    const more = [cost(10, 10), cost(10, 10)];
    expect(await acquireMany(lim, cost(10, 10), { more })).toHaveLength(1);
    expect(await acquireMany(lim, more[0]!, { more: more.slice(1) })).toHaveLength(1);
    expect(await acquireMany(lim, more[1]!)).toHaveLength(1);
    expect((await lim.snapshot()).inFlight).toBe(3);
  });

  it('refuses a budget below 0, naming it', () => {
    expect(() => make({ admitBudgetMs: -1 })).toThrow('admitBudgetMs must be 0 or more, got -1');
  });

  it('takes no more slots than the global concurrency leaves', async () => {
    const lim = make({ limits: { tokens: 100_000 }, concurrency: 3 });
    const got = await acquireMany(lim, cost(10, 10), {
      more: [cost(10, 10), cost(10, 10), cost(10, 10), cost(10, 10)],
    });
    expect(got).toHaveLength(3);
    expect((await lim.snapshot()).inFlight).toBe(3);
  });

  it('admits nobody behind the head while another caller still waits in line', async () => {
    const lim = make({ limits: { tokens: 1_000 } });
    const held = await lim.tryAcquire(cost(450, 450));
    expect(held.ok).toBe(true);
    // Another process waits in line for 200 where 100 are left.
    const other = make({ limits: { tokens: 1_000 } });
    const waiting = new AbortController();
    const waiter = other
      .acquire(cost(100, 100), { priority: 100, signal: waiting.signal })
      .catch(() => undefined);
    await new Promise((r) => setTimeout(r, 50));
    // A more urgent call goes first in line and fits (950); the one behind it (970) would fit
    // too, but it would overtake the waiter.
    const got = await acquireMany(lim, cost(25, 25), { priority: 1, more: [cost(10, 10)] });
    expect(got).toHaveLength(1);
    waiting.abort();
    await waiter;
  });

  it('releases each reservation of a batch on its own', async () => {
    const lim = make({ limits: { tokens: 10_000 } });
    const got = await acquireMany(lim, cost(100, 100), { more: [cost(100, 100), cost(100, 100)] });
    expect(got).toHaveLength(3);
    for (const r of got) await lim.release(r);
    const snap = await lim.snapshot();
    expect(snap.inFlight).toBe(0);
    expect(snap.scopes.find((s) => s.scope === 'global')?.dimensions.tokens.used).toBe(0);
  });
});

describe('settles, releases and stamps of calls that end together', () => {
  it('go in one command, each with its own answer', async () => {
    const lim = make({ limits: { tokens: 10_000 }, outputAccounting: 'actual' });
    const [warm, a, b, c] = await acquireMany(lim, cost(100, 500), {
      more: [cost(100, 500), cost(100, 500), cost(100, 500)],
    });
    expect(c).toBeDefined();
    // Once, so that Redis knows the script and the calls below are one EVALSHA each.
    await lim.release(warm!);
    // Every command the limiter's connection sends while the three end (counted on their way to
    // Redis, which runs them as usual).
    const sent: string[] = [];
    const conn = bed.redis as unknown as { sendCommand: (c: { name: string }) => unknown };
    const send = conn.sendCommand;
    conn.sendCommand = function (this: unknown, c: { name: string }) {
      sent.push(c.name);
      return send.apply(this, [c] as never);
    };
    let answers: unknown[];
    try {
      answers = await Promise.all([
        settle(lim, a!, { inputTokens: 120, outputTokens: 50 }),
        settle(lim, b!, { inputTokens: 100, outputTokens: 500 }),
        lim.release(c!),
      ]);
    } finally {
      conn.sendCommand = send;
    }
    const [sa, sb, sc] = answers;
    expect(sent).toEqual(['evalsha']);
    expect(sa).toEqual({ known: true, inputDelta: 20, outputDelta: -450 });
    expect(sb).toEqual({ known: true, inputDelta: 0, outputDelta: 0 });
    expect(sc).toBeUndefined();
    const snap = await lim.snapshot();
    expect(snap.inFlight).toBe(0);
    expect(snap.scopes.find((s) => s.scope === 'global')?.dimensions.tokens.used).toBe(
      120 + 50 + 600,
    );
    // Each counter holds the sums of the run's calls.
    expect(snap.counters).toMatchObject({
      admitted: 4,
      settled: 2,
      released: 2,
      reservedIn: 200,
      reservedOut: 1_000,
      actualIn: 220,
      actualOut: 550,
      settledReservedIn: 200,
      settledReservedOut: 1_000,
    });
  });

  it('a settle of an unknown reservation says so without spoiling the others', async () => {
    const lim = make({ limits: { tokens: 10_000 } });
    const [a] = await acquireMany(lim, cost(100, 100));
    const ghost = { ...a!, id: 'no-such-reservation' };
    const [ra, rg] = await Promise.all([
      settle(lim, a!, { inputTokens: 90, outputTokens: 100 }),
      settle(lim, ghost, { inputTokens: 90, outputTokens: 100 }),
    ]);
    expect(ra.known).toBe(true);
    expect(rg.known).toBe(false);
  });

  it('stamps several reservations at once', async () => {
    const lim = make({ limits: { tokens: 1_000 }, leaseMs: 30_000 });
    const got = await acquireMany(lim, cost(100, 100), { more: [cost(100, 100)] });
    bed.now += 1_000;
    await Promise.all(got.map((r) => start(lim, r)));
    // Stamped at t0 + 1 s, they leave the window at t0 + 11 s (not at their lease's end).
    bed.now += 10_000;
    const d = await lim.tryAcquire(cost(500, 500));
    expect(d.ok).toBe(true);
  });
});

describe('what a call tells the limiter goes in order, in one command', () => {
  it('a call that begins and ends in the same turn is stamped, then settled, in one run', async () => {
    const lim = make({ limits: { tokens: 1_000 }, leaseMs: 30_000 });
    const [a] = await acquireMany(lim, cost(300, 300));
    counter = await countRedisCommands();
    bed.now += 1_000;
    const call = lim.call(a!);
    await Promise.all([call.begin(), call.succeeded({ inputTokens: 300, outputTokens: 300 })]);
    expect(sent('record')).toBe(1);
    // Stamped at t0 + 1 s, it leaves the window at t0 + 11 s, not at its lease's end (t0 + 30 s).
    bed.now += 9_999;
    expect(await lim.tryAcquire(cost(500, 500))).toMatchObject({ ok: false, reason: 'budget' });
    bed.now += 1;
    expect((await lim.tryAcquire(cost(500, 500))).ok).toBe(true);
  });

  it("a call's reading goes before its own settle, sent together: no other client appears", async () => {
    const lim = make({ limits: { tokens: 10_000 }, outputAccounting: 'actual' });
    const [a] = await acquireMany(lim, cost(1_000, 1_001));
    const call = lim.call(a!);
    // The provider counted the call whole as it admitted it: 2,001 of 10,000. It used 100 of
    // its output: read after the refund, 901 of the reading would look like another's spend.
    await Promise.all([
      call.begin(rateHeaders('tokens', 10_000, 7_999)),
      call.succeeded({ inputTokens: 1_000, outputTokens: 100 }),
    ]);
    const global = (await lim.snapshot()).scopes.find((s) => s.scope === 'global')!;
    const { providerLimit, used, providerRoom } = global.dimensions.tokens;
    expect([providerLimit, used]).toEqual([10_000, 1_100]);
    expect(providerLimit! - used - providerRoom!).toBe(0);
  });

  it("a 429's pause is set before the call's budget comes back, in the same run", async () => {
    const lim = make({ limits: { tokens: 1_000 }, leaseMs: 30_000 });
    const [a] = await acquireMany(lim, cost(400, 400));
    counter = await countRedisCommands();
    const pausedUntil = await lim.call(a!).failed({ pauseMs: 2_000, charged: false });
    expect(pausedUntil).toBe(bed.now + 2_000);
    expect(sent('record')).toBe(1);
    // The budget is back, but nobody is admitted while the pause holds.
    expect(await lim.tryAcquire(cost(500, 500))).toMatchObject({ ok: false, reason: 'paused' });
    bed.now += 2_000;
    expect((await lim.tryAcquire(cost(500, 500))).ok).toBe(true);
  });

  it('a call given back before its response began leaves nothing behind', async () => {
    const lim = make({ limits: { tokens: 1_000 }, leaseMs: 30_000 });
    const [a] = await acquireMany(lim, cost(400, 400));
    await lim.call(a!).abandoned();
    expect((await lim.tryAcquire(cost(500, 500))).ok).toBe(true);
    expect((await lim.snapshot()).counters.released).toBe(1);
  });
});

describe('settles wait a moment for others', () => {
  it('settles of calls that end in different turns go in one command, sent after the wait', async () => {
    const lim = make({ limits: { tokens: 10_000 } });
    const got = await acquireMany(lim, cost(100, 100), { more: [cost(100, 100), cost(100, 100)] });
    counter = await countRedisCommands();
    const first = settle(lim, got[0]!, { inputTokens: 50, outputTokens: 100 });
    // The next turn of the event loop: without the wait, the first would have gone alone.
    await nextTurn();
    const rest = got.slice(1).map((r) => settle(lim, r, { inputTokens: 50, outputTokens: 100 }));
    const answers = await Promise.all([first, ...rest]);
    expect(sent('record')).toBe(1);
    expect(answers.map((a) => a.inputDelta)).toEqual([-50, -50, -50]);
    const snap = await lim.snapshot();
    expect(snap.inFlight).toBe(0);
    expect(snap.scopes.find((s) => s.scope === 'global')?.dimensions.tokens.used).toBe(450);
  });

  it('an acquire takes a waiting settle along, and Redis runs the settle first', async () => {
    const lim = make({ limits: { tokens: 10_000 }, concurrency: 2 });
    const [a] = await acquireMany(lim, cost(100, 100), { more: [cost(100, 100)] });
    counter = await countRedisCommands();
    const settled = settle(lim, a!, { inputTokens: 100, outputTokens: 100 });
    // Both slots are taken until that settle has run: the acquire finds one free.
    expect(await lim.tryAcquire(cost(100, 100))).toMatchObject({ ok: true });
    await settled;
    expect(sent('record')).toBe(1);
  });

  it('close sends the settles still waiting, ahead of what the connection sends next', async () => {
    const conn = bed.redis.duplicate();
    try {
      const lim = testLimiter({
        redis: conn,
        names: bed.names,
        clock: () => bed.now,
        limits: { tokens: 10_000 },
      });
      const [a] = await acquireMany(lim, cost(100, 100));
      const settled = settle(lim, a!, { inputTokens: 50, outputTokens: 100 });
      await lim.close();
      await conn.quit();
      await expect(settled).resolves.toEqual({ known: true, inputDelta: -50, outputDelta: 0 });
      const snap = await make().snapshot();
      expect(snap.inFlight).toBe(0);
      expect(snap.counters).toMatchObject({ settled: 1 });
    } finally {
      conn.disconnect();
    }
  });

  it('a release goes at the end of its turn and takes a waiting settle along', async () => {
    const lim = make({ limits: { tokens: 10_000 } });
    const [a, b] = await acquireMany(lim, cost(100, 100), { more: [cost(100, 100)] });
    counter = await countRedisCommands();
    const settled = settle(lim, a!, { inputTokens: 100, outputTokens: 100 });
    const released = lim.release(b!);
    await nextTurn();
    await nextTurn();
    expect(sent('record')).toBe(1);
    await Promise.all([settled, released]);
    expect(sent('record')).toBe(1);
  });
});
