import { describe, expect, it } from 'vitest';
import { Limiter } from '../shared/limiter/limiter.ts';
import { acquireMany, admitted, callCost, eachTestLimiter, settle, start } from './helpers.ts';

const bed = eachTestLimiter('lim');

const make = bed.make;
const cost = callCost;

describe('limiter basics', () => {
  it('admits until the window is full, then says how long to wait', async () => {
    const lim = make({ limits: { tokens: 1000 } });
    const a = await lim.tryAcquire(cost(100, 300));
    expect(a.ok).toBe(true);
    if (a.ok) await settle(lim, a.reservation, { inputTokens: 100, outputTokens: 300 });
    const b = await lim.tryAcquire(cost(200, 300));
    expect(b.ok).toBe(true);
    bed.now += 2_000;
    const c = await lim.tryAcquire(cost(100, 300));
    expect(c).toMatchObject({ ok: false, reason: 'budget', scope: 'global', dimension: 'tokens' });
    // The first reservation was stamped at settle (t0) and leaves the window at t0 + 10 s.
    if (!c.ok) expect(c.waitMs).toBe(8_000);
  });

  it('with more calls in the window than a wait reads, looks again early, never late', async () => {
    const lim = make({ limits: { tokens: 1_000 } });
    const t0 = bed.now;
    // 300 calls of 2 tokens, one a millisecond, each settled (stamped) as it is admitted.
    for (let i = 0; i < 300; i++) {
      bed.now = t0 + i;
      await settle(lim, await admitted(lim, cost(1, 1)), { inputTokens: 1, outputTokens: 1 });
    }
    bed.now = t0 + 1_000;
    const leaves = (k: number) => t0 + (k - 1) + lim.windowMs - bed.now;
    // 900 where 400 are left: 250 of the calls must go, the 250th at t0 + 249 + window.
    expect(await lim.tryAcquire(cost(450, 450))).toMatchObject({ ok: false, waitMs: leaves(250) });
    // 1,000: all 300 must go; a wait reads the oldest 256 and says to look again as they go.
    const early = await lim.tryAcquire(cost(500, 500));
    expect(early).toMatchObject({ ok: false, waitMs: leaves(256) });
    bed.now += early.ok ? 0 : early.waitMs;
    const again = await lim.tryAcquire(cost(500, 500));
    expect(again).toMatchObject({ ok: false, waitMs: leaves(300) });
    bed.now += again.ok ? 0 : again.waitMs;
    expect((await lim.tryAcquire(cost(500, 500))).ok).toBe(true);
  });

  it('refuses a cost that can never fit, naming the limit', async () => {
    const lim = make({ limits: { outputTokens: 500 } });
    await expect(lim.tryAcquire(cost(10, 600))).rejects.toMatchObject({
      code: 'COST_EXCEEDS_LIMIT',
      dimension: 'outputTokens',
      limit: 500,
    });
  });
});

describe('taking back the room our own calls free', () => {
  it('a stamped call’s room is ours again the moment the provider’s window drops it', async () => {
    // The defaults, as a worker runs: the window is the provider's and no more.
    const lim = new Limiter({
      redis: bed.redis,
      names: bed.names,
      windowMs: 10_000,
      headroom: 0,
      limits: { tokens: 1_000 },
      clock: () => bed.now,
    });
    const first = await lim.tryAcquire(cost(400, 600));
    if (!first.ok) throw new Error(`expected admission, got ${JSON.stringify(first)}`);
    // The response begins 5 ms after the provider admitted the call: the stamp is that late.
    bed.now += 5;
    await start(lim, first.reservation);
    await settle(lim, first.reservation, { inputTokens: 400, outputTokens: 600 });
    // The provider counted the call from its admission, before the stamp: its window drops it
    // 5 ms before ours does. Any later, and another client on the key may take that room
    // first (what every traced 429 beside a neighbour was).
    bed.now += 10_000 - 5;
    const denied = await lim.tryAcquire(cost(400, 600));
    expect(denied).toMatchObject({ ok: false, reason: 'budget' });
    expect(denied.ok ? 0 : denied.waitMs).toBeLessThanOrEqual(6);
    bed.now += 5;
    expect((await lim.tryAcquire(cost(400, 600))).ok).toBe(true);
    await lim.close();
  });
});

describe('limiter memory', () => {
  it('holds no reservation once the window has passed, however many there were', async () => {
    const lim = make({ limits: { tokens: 10_000_000 } });
    const pipeline = [];
    for (let i = 0; i < 1_200; i++) pipeline.push(lim.tryAcquire(cost(1, 1)));
    for (const d of await Promise.all(pipeline)) {
      if (!d.ok) throw new Error('expected admission');
      await settle(lim, d.reservation, { inputTokens: 1, outputTokens: 1 });
    }
    expect(await bed.redis.zcard(`${bed.names.prefix}:{${bed.names.queue}}:limiter:log`)).toBe(
      1_200,
    );
    bed.now += 10_001;
    await lim.prune();
    const snap = await lim.snapshot();
    expect(snap.scopes.find((s) => s.scope === 'global')?.dimensions.tokens.used).toBe(0);
    expect(await bed.redis.zcard(`${bed.names.prefix}:{${bed.names.queue}}:limiter:log`)).toBe(0);
    expect(await bed.redis.hlen(`${bed.names.prefix}:{${bed.names.queue}}:limiter:res`)).toBe(0);
  });
});

describe('one admission, one taker', () => {
  it('admits one call per job until its hold lapses; the calls behind stop at a taken one', async () => {
    const lim = make({ limits: { tokens: 10_000 } });
    const first = await lim.tryAcquire({ ...cost(10, 10), take: 'job-1' });
    expect(first.ok).toBe(true);
    // Another worker that peeked the same job is told to look again, not admitted.
    const again = await lim.tryAcquire({ ...cost(10, 10), take: 'job-1' });
    expect(again).toMatchObject({ ok: false, reason: 'taken' });
    expect(again.ok || again.waitMs).toBeLessThanOrEqual(20);
    const [head, ...more] = await acquireMany(
      lim,
      { ...cost(10, 10), take: 'job-2' },
      {
        more: [
          { ...cost(10, 10), take: 'job-3' },
          { ...cost(10, 10), take: 'job-1' },
          { ...cost(10, 10), take: 'job-4' },
        ],
      },
    );
    expect(head).toBeDefined();
    expect(more).toHaveLength(1);
    // Its reservation given back (its worker took another job), the hold on its job ends with it.
    if (!first.ok) throw new Error('refused');
    await lim.release(first.reservation);
    const taken = await lim.tryAcquire({ ...cost(10, 10), take: 'job-1' });
    expect(taken.ok).toBe(true);
    // Else a second later the hold lapses: its taker had its chance.
    bed.now += 1_001;
    expect((await lim.tryAcquire({ ...cost(10, 10), take: 'job-1' })).ok).toBe(true);
  });
});
