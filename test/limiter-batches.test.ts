import type { Redis } from 'ioredis';
import { beforeEach, describe, expect, it } from 'vitest';
import type { QueueNames } from '../shared/keys.ts';
import type { LimiterOptions } from '../shared/limiter/limiter.ts';
import { eachTestRedis, testLimiter } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
let t: number;

eachTestRedis('batch', (r, n) => {
  redis = r;
  names = n;
});
beforeEach(() => {
  t = 1_700_000_000_000;
});

const make = (o: Partial<LimiterOptions> = {}) =>
  testLimiter({ redis, names, clock: () => t, ...o });
const cost = (inputTokens: number, outputTokens: number) => ({
  requests: 1,
  inputTokens,
  outputTokens,
});

describe('acquireMany: the jobs behind the head in one round trip', () => {
  it('admits those behind in order while they fit, and stops at the first that does not', async () => {
    const lim = make({ limits: { tokens: 1_000 } });
    const got = await lim.acquireMany(cost(100, 100), {
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

  it('takes no more slots than the global concurrency leaves', async () => {
    const lim = make({ limits: { tokens: 100_000 }, concurrency: 3 });
    const got = await lim.acquireMany(cost(10, 10), {
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
    const got = await lim.acquireMany(cost(25, 25), { priority: 1, more: [cost(10, 10)] });
    expect(got).toHaveLength(1);
    waiting.abort();
    await waiter;
  });

  it('releases each reservation of a batch on its own', async () => {
    const lim = make({ limits: { tokens: 10_000 } });
    const got = await lim.acquireMany(cost(100, 100), { more: [cost(100, 100), cost(100, 100)] });
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
    const [warm, a, b, c] = await lim.acquireMany(cost(100, 500), {
      more: [cost(100, 500), cost(100, 500), cost(100, 500)],
    });
    expect(c).toBeDefined();
    // Once, so that Redis knows the script and the calls below are one EVALSHA each.
    await lim.release(warm!);
    // Every command this connection sends while the three end, as MONITOR shows them.
    const monitor = await redis.monitor();
    const mine = `127.0.0.1:${(redis as unknown as { stream: { localPort: number } }).stream.localPort}`;
    const sent: string[] = [];
    monitor.on('monitor', (_time: string, args: string[], source: string) => {
      if (source === mine) sent.push(String(args[0]).toLowerCase());
    });
    await new Promise((r) => setTimeout(r, 20));
    const [sa, sb, sc] = await Promise.all([
      lim.settle(a!, { inputTokens: 120, outputTokens: 50 }),
      lim.settle(b!, { inputTokens: 100, outputTokens: 500 }),
      lim.release(c!),
    ]);
    await redis.ping();
    await new Promise((r) => setTimeout(r, 20));
    monitor.disconnect();
    expect(sent.filter((c) => c.startsWith('eval'))).toEqual(['evalsha']);
    expect(sa).toEqual({ known: true, inputDelta: 20, outputDelta: -450 });
    expect(sb).toEqual({ known: true, inputDelta: 0, outputDelta: 0 });
    expect(sc).toBeUndefined();
    const snap = await lim.snapshot();
    expect(snap.inFlight).toBe(0);
    expect(snap.scopes.find((s) => s.scope === 'global')?.dimensions.tokens.used).toBe(
      120 + 50 + 600,
    );
    expect(snap.counters).toMatchObject({ settled: 2, released: 2 });
  });

  it('a settle of an unknown reservation says so without spoiling the others', async () => {
    const lim = make({ limits: { tokens: 10_000 } });
    const [a] = await lim.acquireMany(cost(100, 100));
    const ghost = { ...a!, id: 'no-such-reservation' };
    const [ra, rg] = await Promise.all([
      lim.settle(a!, { inputTokens: 90, outputTokens: 100 }),
      lim.settle(ghost, { inputTokens: 90, outputTokens: 100 }),
    ]);
    expect(ra.known).toBe(true);
    expect(rg.known).toBe(false);
  });

  it('stamps several reservations at once', async () => {
    const lim = make({ limits: { tokens: 1_000 }, leaseMs: 30_000 });
    const got = await lim.acquireMany(cost(100, 100), { more: [cost(100, 100)] });
    t += 1_000;
    await Promise.all(got.map((r) => lim.start(r)));
    // Stamped at t0 + 1 s, they leave the window at t0 + 11 s (not at their lease's end).
    t += 10_100;
    const d = await lim.tryAcquire(cost(500, 500));
    expect(d.ok).toBe(true);
  });
});
