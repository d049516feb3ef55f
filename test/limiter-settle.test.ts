import { describe, expect, it } from 'vitest';
import type { Limiter } from '../shared/limiter/limiter.ts';
import type { Dimension } from '../shared/limiter/types.ts';
import { admitted, callCost, eachTestLimiter, keep, settle, start } from './helpers.ts';

const bed = eachTestLimiter('limsettle', {
  limits: { inputTokens: 1_000, outputTokens: 1_000, tokens: 2_000 },
});

const make = bed.make;
const cost = callCost;

async function used(lim: Limiter, dim: Dimension): Promise<number> {
  const snap = await lim.snapshot();
  return snap.scopes.find((s) => s.scope === 'global')?.dimensions[dim].used ?? 0;
}

describe('settling a reservation', () => {
  it('gives an overestimate of input back, so a later acquire fits', async () => {
    const lim = make();
    const r = await admitted(lim, cost(800, 100));
    expect(await lim.tryAcquire(cost(500, 100))).toMatchObject({
      ok: false,
      dimension: 'inputTokens',
    });
    expect(await settle(lim, r, { inputTokens: 300, outputTokens: 100 })).toEqual({
      known: true,
      inputDelta: -500,
      outputDelta: 0,
    });
    expect(await used(lim, 'inputTokens')).toBe(300);
    expect(await lim.tryAcquire(cost(500, 100))).toMatchObject({ ok: true });
  });

  it('charges an underestimate of input, so a later acquire that would have fitted waits', async () => {
    const lim = make();
    const r = await admitted(lim, cost(300, 100));
    await settle(lim, r, { inputTokens: 900, outputTokens: 100 });
    expect(await used(lim, 'inputTokens')).toBe(900);
    expect(await used(lim, 'tokens')).toBe(1_000);
    const d = await lim.tryAcquire(cost(200, 100));
    expect(d).toMatchObject({ ok: false, reason: 'budget', dimension: 'inputTokens' });
    // Counted from settle (when it was stamped), for one window.
    if (!d.ok) expect(d.waitMs).toBe(10_000);
  });

  it('gives everything back on release: the call never reached the provider', async () => {
    const lim = make({ concurrency: 1 });
    const r = await admitted(lim, cost(900, 900));
    expect(await lim.tryAcquire(cost(1, 1))).toMatchObject({ ok: false });
    await lim.release(r);
    for (const dim of ['requests', 'inputTokens', 'outputTokens', 'tokens'] as const) {
      expect(await used(lim, dim)).toBe(0);
    }
    expect((await lim.snapshot()).inFlight).toBe(0);
    expect(await lim.tryAcquire(cost(1_000, 1_000))).toMatchObject({ ok: true });
  });

  it('keeps the estimate charged on keep: no usage came back, the provider may have counted it', async () => {
    const lim = make({ concurrency: 1 });
    const r = await admitted(lim, cost(600, 400));
    bed.now += 1_000;
    await keep(lim, r);
    expect(await used(lim, 'inputTokens')).toBe(600);
    expect(await used(lim, 'outputTokens')).toBe(400);
    // The slot is free, the budget is not: stamped at keep, it leaves the window a window later.
    const d = await lim.tryAcquire(cost(500, 100));
    expect(d).toMatchObject({ ok: false, reason: 'budget', dimension: 'inputTokens' });
    if (!d.ok) expect(d.waitMs).toBe(10_000);
    bed.now += 10_000;
    expect(await lim.tryAcquire(cost(500, 100))).toMatchObject({ ok: true });
  });

  it("keeps max_tokens charged under 'reserve' accounting even when less output came back", async () => {
    const lim = make({ outputAccounting: 'reserve' });
    const r = await admitted(lim, cost(100, 900));
    expect(await settle(lim, r, { inputTokens: 100, outputTokens: 50 })).toMatchObject({
      outputDelta: 0,
    });
    expect(await used(lim, 'outputTokens')).toBe(900);
    expect(await lim.tryAcquire(cost(100, 200))).toMatchObject({
      ok: false,
      dimension: 'outputTokens',
    });
  });

  it("still reports the output that came back under 'reserve' accounting, for the estimate's accuracy", async () => {
    const lim = make({ outputAccounting: 'reserve' });
    const r = await admitted(lim, cost(100, 900));
    await settle(lim, r, { inputTokens: 80, outputTokens: 50 });
    const snap = await lim.snapshot();
    expect(snap.counters).toMatchObject({
      actualIn: 80,
      actualOut: 50,
      settledReservedIn: 100,
      settledReservedOut: 900,
    });
    expect(await used(lim, 'outputTokens')).toBe(900);
  });

  it("under 'actual' accounting, a call counts from when its response began, and its unused output comes back", async () => {
    const lim = make({ outputAccounting: 'actual' });
    const r = await admitted(lim, cost(100, 900));
    await start(lim, r);
    bed.now += 4_000;
    expect(await settle(lim, r, { inputTokens: 100, outputTokens: 50 })).toMatchObject({
      outputDelta: -850,
    });
    expect(await used(lim, 'outputTokens')).toBe(50);
    expect(await lim.tryAcquire(cost(100, 900))).toMatchObject({ ok: true });
    // The provider counted it at admission: it left a window after it began; the second stays.
    bed.now += 6_000;
    expect(await used(lim, 'outputTokens')).toBe(900);
  });

  it("under 'produced' accounting, a call streaming longer than the window stays counted until it settles", async () => {
    const lim = make({ outputAccounting: 'produced', leaseMs: 5_000 });
    const r = await admitted(lim, cost(500, 900));
    await start(lim, r);
    // The response streams for three windows, its lease renewed as it goes.
    for (let i = 0; i < 12; i++) {
      bed.now += 2_500;
      expect(await lim.renew(r)).toBe(true);
    }
    expect(await lim.tryAcquire(cost(100, 200))).toMatchObject({
      ok: false,
      dimension: 'outputTokens',
    });
    expect(await settle(lim, r, { inputTokens: 500, outputTokens: 700 })).toEqual({
      known: true,
      inputDelta: 0,
      outputDelta: -200,
    });
    expect(await used(lim, 'outputTokens')).toBe(700);
    expect(await lim.tryAcquire(cost(100, 300))).toMatchObject({ ok: true });
    expect(await lim.tryAcquire(cost(100, 100))).toMatchObject({
      ok: false,
      dimension: 'outputTokens',
    });
  });

  it("under 'produced' accounting, a call's input leaves a window after its response began, its output a window after it ended", async () => {
    const lim = make({ outputAccounting: 'produced' });
    const r = await admitted(lim, cost(900, 900));
    // The response begins now (the provider counted the input by then) and streams for 4 s.
    await start(lim, r);
    bed.now += 4_000;
    expect(await settle(lim, r, { inputTokens: 700, outputTokens: 600 })).toEqual({
      known: true,
      inputDelta: -200,
      outputDelta: -300,
    });
    expect(await used(lim, 'inputTokens')).toBe(700);
    // Input room comes back a window after the response began, when its input leaves.
    const d = await lim.tryAcquire(cost(400, 100));
    expect(d).toMatchObject({ ok: false, reason: 'budget', dimension: 'inputTokens' });
    if (!d.ok) expect(d.waitMs).toBe(6_000);
    bed.now += 6_000;
    expect(await used(lim, 'inputTokens')).toBe(0);
    expect(await used(lim, 'requests')).toBe(0);
    // The output stays until a window after the call ended.
    expect(await used(lim, 'outputTokens')).toBe(600);
    expect(await lim.tryAcquire(cost(1_000, 400))).toMatchObject({ ok: true });
    expect(await lim.tryAcquire(cost(0, 100))).toMatchObject({
      ok: false,
      dimension: 'outputTokens',
    });
  });

  it('refuses usage that is not a whole number of tokens, and the calls settled beside it are unharmed', async () => {
    const lim = make({ outputAccounting: 'actual' });
    const a = await admitted(lim, cost(100, 100));
    const b = await admitted(lim, cost(100, 100));
    // In the same turn, so that a bad count sent along would fail both in one script.
    const [good, bad] = await Promise.allSettled([
      settle(lim, a, { inputTokens: 120, outputTokens: 50 }),
      settle(lim, b, { inputTokens: 100.5, outputTokens: 60 }),
    ]);
    expect(good).toEqual({
      status: 'fulfilled',
      value: { known: true, inputDelta: 20, outputDelta: -50 },
    });
    expect(bad.status).toBe('rejected');
    expect(String((bad as PromiseRejectedResult).reason)).toMatch(
      /usage\.inputTokens must be a whole number of tokens from 0 up, got 100\.5/,
    );
    await expect(settle(lim, b, { inputTokens: 100, outputTokens: -1 })).rejects.toThrow(
      /usage\.outputTokens .* got -1/,
    );
    // The refused call still holds its estimate, and the window frees all of it on time.
    expect(await used(lim, 'inputTokens')).toBe(220);
    await keep(lim, b);
    bed.now += 61_000;
    expect(await used(lim, 'inputTokens')).toBe(0);
    expect(await lim.tryAcquire(cost(900, 900))).toMatchObject({ ok: true });
  });

  it('releases a reservation of zero tokens', async () => {
    const lim = make();
    const r = await admitted(lim, { requests: 1, inputTokens: 0, outputTokens: 0 });
    await lim.release(r);
    expect((await lim.snapshot()).counters).toMatchObject({
      admitted: 1,
      released: 1,
      reservedIn: 0,
      reservedOut: 0,
    });
  });
});
