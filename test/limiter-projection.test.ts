import { describe, expect, it } from 'vitest';
import type { Limiter } from '../shared/limiter/limiter.ts';
import {
  acquireMany,
  admitted,
  callCost,
  eachTestLimiter,
  rateHeaders,
  settle,
  start,
} from './helpers.ts';

/*
 * The provider's view (docs/limiter.md): a reading is the provider's count when it admitted the
 * call that brought it; the limiter projects it forward by the provider's shape, and admits a
 * call only when it fits the projection as well as its own window.
 */

const T0 = 1_800_000_000_000;
const W = 10_000;

const bed = eachTestLimiter('proj', { windowMs: W, limits: { tokens: 4_000 } }, T0);
const make = bed.make;
const cost = callCost;

/** The tokens reading of a sliding window: reset one window after the call just admitted. */
const windowReading = (remaining: number, limit = 4_000) =>
  rateHeaders('tokens', limit, remaining, W, bed.now);
/** The tokens reading of a bucket: full again once what is missing has refilled. */
const bucketReading = (remaining: number, limit = 4_000) =>
  rateHeaders('tokens', limit, remaining, ((limit - remaining) * W) / limit, bed.now);

async function tokensView(lim: Limiter, d: 'tokens' | 'outputTokens' = 'tokens') {
  const global = (await lim.snapshot()).scopes.find((s) => s.scope === 'global')!;
  return { shape: global.shape, step: global.roundingStep, ...global.dimensions[d] };
}

describe('a window-shaped provider', () => {
  it('takes a reading that agrees with our own spend as ours: our window alone decides', async () => {
    const lim = make();
    const r = await admitted(lim, cost(1_003));
    await start(lim, r, windowReading(2_997));
    expect(await tokensView(lim)).toMatchObject({
      shape: 'window',
      used: 1_003,
      providerRoom: 2_997,
    });
    expect((await lim.tryAcquire(cost(2_997))).ok).toBe(true);
  });

  it("counts another client's spend until the reading is a window old", async () => {
    const lim = make();
    const r = await admitted(lim, cost(1_003));
    // 1,000 more than ours is spent: another client's.
    await start(lim, r, windowReading(1_997));
    expect(await lim.tryAcquire(cost(1_998))).toMatchObject({
      ok: false,
      reason: 'budget',
      waitMs: W,
    });
    await start(lim, await admitted(lim, cost(1_997)));
    // A window on, all the reading counted has left a window: only our own window is left.
    bed.now += W - 1;
    expect((await lim.tryAcquire(cost(1))).ok).toBe(false);
    bed.now += 1;
    expect((await lim.tryAcquire(cost(4_000))).ok).toBe(true);
  });

  it('gives the room back our own calls free as they leave the window', async () => {
    const lim = make();
    const a = await admitted(lim, cost(2_003));
    await start(lim, a);
    bed.now += 4_000;
    const b = await admitted(lim, cost(997));
    // Another client's 500 beside our 3,000.
    await start(lim, b, windowReading(497));
    // When our first call leaves (6 s on), its 2,003 are free in the provider's window too.
    const d = await lim.tryAcquire(cost(2_000));
    expect(d).toMatchObject({ ok: false, waitMs: 6_000 });
    bed.now += 6_000;
    expect((await lim.tryAcquire(cost(2_000))).ok).toBe(true);
    // The other client's 503 stay counted until the reading is a window old.
    expect((await lim.tryAcquire(cost(501))).ok).toBe(false);
    expect((await lim.tryAcquire(cost(500))).ok).toBe(true);
  });

  it('frees once the room of a call the provider dropped before the reading', async () => {
    const lim = make();
    // Sent now, its answer begins 4 s later: our window holds it until then + W.
    const a = await admitted(lim, cost(2_000));
    bed.now += 4_000;
    await start(lim, a, undefined, 4_000);
    // Half a second past a window: the provider dropped a, and holds b and another client's 501
    // (2,499 is no multiple of a step: an exact reading).
    bed.now += 6_500;
    const b = await admitted(lim, cost(1_000));
    await start(lim, b, windowReading(2_499));
    // When a leaves our window, the reading's 2,499 stand: a's room came back in it already.
    bed.now += 3_500;
    expect((await tokensView(lim)).providerRoom).toBe(2_499);
    expect((await lim.tryAcquire(cost(2_500))).ok).toBe(false);
    expect((await lim.tryAcquire(cost(2_499))).ok).toBe(true);
  });

  it("does not let our calls on their way hide another client's spend", async () => {
    const lim = make();
    const a = await admitted(lim, cost(1_003));
    // On its way when the reading came: the provider had not counted it.
    await admitted(lim, cost(997));
    await start(lim, a, windowReading(1_997));
    // Ours: 2,000; the provider's: 1,000 other + 1,003 counted + 997 to come = 3,000.
    expect((await lim.tryAcquire(cost(1_001))).ok).toBe(false);
    expect((await lim.tryAcquire(cost(1_000))).ok).toBe(true);
  });

  it("sends the last of the room beside another client's rising spend one call at a time", async () => {
    const lim = make();
    await start(lim, await admitted(lim, cost(1_000)), windowReading(2_997));
    // The next reading shows another client's call of about 1,000 since: the last 999 of the
    // room (1,496) is where its next one lands.
    await start(lim, await admitted(lim, cost(500)), windowReading(1_497));
    expect((await lim.tryAcquire(cost(400))).ok).toBe(true);
    const probe = await admitted(lim, cost(400));
    expect(await lim.tryAcquire(cost(400))).toMatchObject({
      ok: false,
      reason: 'concurrency',
      scope: 'global',
    });
    // The probe's answer began: the next goes, as the next probe.
    await start(lim, probe);
    const next = await admitted(lim, cost(300));
    expect((await lim.tryAcquire(cost(100))).ok).toBe(false);
    // A window after the rise, calls go together again.
    await start(lim, next);
    bed.now += W;
    expect((await lim.tryAcquire(cost(2_000))).ok).toBe(true);
    expect((await lim.tryAcquire(cost(1_500))).ok).toBe(true);
  });

  it('counts a rounded reading at the low end of its rounding, ours or not', async () => {
    const lim = make();
    const r = await admitted(lim, cost(300));
    // Rounded to the nearest 100 (the step is learned): 3,700 may be 50 above the truth, even
    // where it agrees with our 3,700 left (another client may have spent up to 50).
    await start(lim, r, windowReading(3_700));
    expect(await tokensView(lim)).toMatchObject({ step: 100, providerRoom: 3_650 });
    bed.now += 1;
    const b = await admitted(lim, cost(300));
    // 3,400 of ours left, the provider says 3,000: another client's spend, and the reading
    // may be 50 above the truth: its low end counts.
    await start(lim, b, windowReading(3_000));
    expect((await tokensView(lim)).providerRoom).toBe(2_950);
    expect((await lim.tryAcquire(cost(2_951))).ok).toBe(false);
  });

  it('takes the calls past a cut-short scan of pending calls as not counted: no room added', async () => {
    const lim = make({ limits: { tokens: 20_000 } });
    const r = await admitted(lim, cost(1));
    // More calls not begun than one reading's scan of them reads (2,000): 2,050 of 2 tokens.
    let pending = 0;
    while (pending < 2_050) {
      const n = Math.min(500, 2_050 - pending);
      const more = Array.from({ length: n - 1 }, () => cost(2));
      pending += (await acquireMany(lim, cost(2), { more })).length;
    }
    // The reading counted r alone (4,999 is no multiple of a step: exact). The provider has
    // 4,999 less the 4,100 not begun at most; the 50 calls the scan did not read count too.
    await start(lim, r, windowReading(4_999, 20_000));
    expect((await tokensView(lim)).providerRoom).toBeLessThanOrEqual(4_999 - 4_100);
    expect((await lim.tryAcquire(cost(900))).ok).toBe(false);
  });

  it("caps the configured limit by the provider's, and reads one where none is configured", async () => {
    const lim = make({ limits: {} });
    const r = await admitted(lim, cost(1_003));
    await start(lim, r, windowReading(2_997, 4_000));
    expect((await lim.tryAcquire(cost(2_998))).ok).toBe(false);
    await expect(lim.tryAcquire(cost(4_001))).rejects.toThrow(/needs 4001 tokens/);
  });
});

describe('a bucket-shaped provider', () => {
  it('is known by its reset, and what it refills is admitted beyond our own window', async () => {
    const lim = make();
    const r = await admitted(lim, cost(1_003));
    // Full again in 2.5 s of a 10 s window: a bucket, not a sliding window.
    await start(lim, r, bucketReading(2_997));
    expect((await tokensView(lim)).shape).toBe('bucket');
    // What is left of the bucket fits at once; our window is full then.
    expect((await lim.tryAcquire(cost(2_997))).ok).toBe(true);
    // The bucket refills 0.4 tokens a ms: 997 more in 2,493 ms.
    const d = await lim.tryAcquire(cost(997));
    expect(d).toMatchObject({ ok: false, reason: 'budget' });
    if (!d.ok) expect(d.waitMs).toBe(2_493);
    bed.now += 2_492;
    expect((await lim.tryAcquire(cost(997))).ok).toBe(false);
    bed.now += 1;
    expect((await lim.tryAcquire(cost(997))).ok).toBe(true);
    expect((await lim.tryAcquire(cost(1))).ok).toBe(false);
  });

  it("takes no shape from a 429's reading: its reset dates from another call", async () => {
    const lim = make();
    const r = await admitted(lim, cost(1_003));
    // A window refusing a call tells when its newest admission leaves, which may look like a
    // bucket's full time: only an admitted call's reading says what shape the limit has.
    await lim.call(r).failed({ charged: false }, bucketReading(2_997));
    expect((await tokensView(lim)).shape).toBe('unknown');
    const b = await admitted(lim, cost(1_003));
    await start(lim, b, bucketReading(1_994));
    expect((await tokensView(lim)).shape).toBe('bucket');
  });

  it('refills no more than its capacity, and lapses to our own window after a window', async () => {
    const lim = make();
    const r = await admitted(lim, cost(1_003));
    await start(lim, r, bucketReading(2_997));
    bed.now += 9_000;
    // Full long ago: the bucket's capacity less what we took since the reading.
    const extra = await admitted(lim, cost(2_997));
    await settle(lim, extra, { inputTokens: 2_997, outputTokens: 0 });
    expect((await lim.tryAcquire(cost(1_004))).ok).toBe(false);
    expect((await lim.tryAcquire(cost(1_003))).ok).toBe(true);
    // A window after the reading it lapses: our window (all 5,003 in it) decides again.
    bed.now += 1_000;
    expect((await lim.tryAcquire(cost(1))).ok).toBe(false);
  });

  it('takes no room from an estimate the reading had counted as it really was', async () => {
    const lim = make();
    // Reserved 3,000 for a document the provider counts 1,799: its reading says 2,201 left.
    const r = await admitted(lim, cost(3_000));
    await start(lim, r, bucketReading(2_201));
    // The usage brings our count down to 1,799; the provider's room is still 2,201.
    await settle(lim, r, { inputTokens: 1_799, outputTokens: 0 });
    expect((await tokensView(lim)).providerRoom).toBe(2_201);
    expect((await lim.tryAcquire(cost(2_202))).ok).toBe(false);
    expect((await lim.tryAcquire(cost(2_201))).ok).toBe(true);
  });

  it('learns its rounding from the readings when the limit is no multiple of it', async () => {
    const lim = make({ limits: { tokens: 1_521 } });
    // Readings rounded to 38: 999 left reads 988, then 401 left reads 418.
    await start(lim, await admitted(lim, cost(522)), bucketReading(988, 1_521));
    bed.now += 1;
    await start(lim, await admitted(lim, cost(598)), bucketReading(418, 1_521));
    expect((await tokensView(lim)).step).toBe(38);
    // 418 may be 399 rounded up: 402 is more than the bucket may hold.
    expect((await lim.tryAcquire(cost(402))).ok).toBe(false);
  });

  it('takes no call begun after the reading’s call was sent as counted there', async () => {
    const lim = make();
    const a = await admitted(lim, cost(1_003));
    bed.now += 5;
    const b = await admitted(lim, cost(1_000));
    // b, sent after a, begins first; then a's answer, sent 10 ms ago, with 2,997 left.
    await start(lim, b);
    bed.now += 5;
    await start(lim, a, bucketReading(2_997), 10);
    // The provider may have admitted b after a: it is taken from the 2,997.
    expect((await tokensView(lim)).providerRoom).toBe(1_997);
    expect((await lim.tryAcquire(cost(1_998))).ok).toBe(false);
    expect((await lim.tryAcquire(cost(1_997))).ok).toBe(true);
  });

  it('takes an older answer that comes last as news of when its call was sent', async () => {
    const lim = make();
    const a = await admitted(lim, cost(1_003));
    bed.now += 10;
    const b = await admitted(lim, cost(1_000));
    bed.now += 10;
    await start(lim, b, bucketReading(1_997), 10);
    // b's reading cannot tell whether a, not begun then, was admitted before it: it leaves
    // 998 (1,997, 4 refilled, less a). a's answer comes after b's, with what was left before
    // b; of readings of calls in flight together, the one that leaves less room stands: a
    // reading older than another client's spend would show room that is gone.
    bed.now += 10;
    await start(lim, a, bucketReading(2_997), 30);
    expect((await tokensView(lim)).providerRoom).toBe(998);
  });

  it('takes a call begun with a reading as counted by the newest reading', async () => {
    const lim = make();
    // Both sent at once; the provider admits a, then b: 2,997 left after a, 1,994 after b.
    const a = await admitted(lim, cost(1_003));
    const b = await admitted(lim, cost(1_003));
    bed.now += 2;
    await start(lim, a, bucketReading(2_997), 2);
    // a brought a reading: it was admitted before the newest reading, whichever that is, and
    // of the two the one that leaves less room stands: b's, which counted a.
    await start(lim, b, bucketReading(1_994), 2);
    expect((await tokensView(lim)).providerRoom).toBe(1_994);
    expect((await lim.tryAcquire(cost(1_995))).ok).toBe(false);
    expect((await lim.tryAcquire(cost(1_994))).ok).toBe(true);
  });

  it('puts unused output given back into the bucket, which holds no more than its limit', async () => {
    const lim = make({ limits: { outputTokens: 4_000 }, outputAccounting: 'actual' });
    const r = await admitted(lim, cost(0, 1_001));
    await start(lim, r, rateHeaders('output-tokens', 4_000, 2_999, 2_503, bed.now));
    // 100 ms on, 900 of the 1,001 come back: 2,999 + 40 refilled + 900.
    bed.now += 100;
    await settle(lim, r, { inputTokens: 0, outputTokens: 101 });
    expect((await tokensView(lim, 'outputTokens')).providerRoom).toBe(3_939);
    // Full 2.5 s later: what came back does not make it hold more.
    bed.now += 3_000;
    expect((await tokensView(lim, 'outputTokens')).providerRoom).toBe(4_000);
  });

  it('keeps our window beside it when the configured limit is below the provider’s', async () => {
    const lim = make({ limits: { tokens: 2_000 } });
    const r = await admitted(lim, cost(1_500));
    await start(lim, r, bucketReading(2_500));
    bed.now += 5_000;
    expect((await lim.tryAcquire(cost(501))).ok).toBe(false);
    expect((await lim.tryAcquire(cost(500))).ok).toBe(true);
  });
});

describe('output counted as it is produced', () => {
  it("leaves the output of calls in flight to come, where 'actual' takes it as counted", async () => {
    const limits = { outputTokens: 4_000 };
    const reading = rateHeaders('output-tokens', 4_000, 2_999, W, bed.now);
    const admittedCall = async (lim: Limiter) => {
      const a = await admitted(lim, cost(10, 1_000));
      await start(lim, a, reading);
    };
    // The provider counted max_tokens at admission: 1,001 of its 4,000 (1 someone else's).
    const actual = make({ limits, outputAccounting: 'actual' });
    await admittedCall(actual);
    expect((await actual.tryAcquire(cost(10, 3_000))).ok).toBe(false);
    expect((await actual.tryAcquire(cost(10, 2_999))).ok).toBe(true);
    await actual.destroy();
    // It counts output as produced: the 1,001 it counted are someone else's, ours are to come.
    const produced = make({ limits, outputAccounting: 'produced' });
    await admittedCall(produced);
    expect((await produced.tryAcquire(cost(10, 2_000))).ok).toBe(false);
    expect((await produced.tryAcquire(cost(10, 1_999))).ok).toBe(true);
  });
});
