import type { Redis } from 'ioredis';
import { beforeEach, describe, expect, it } from 'vitest';
import type { QueueNames } from '../shared/keys.ts';
import type { Limiter, LimiterOptions } from '../shared/limiter/limiter.ts';
import type { Reservation } from '../shared/limiter/types.ts';
import { eachTestRedis, testLimiter } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
let t: number;

eachTestRedis('limobs', (r, n) => {
  redis = r;
  names = n;
});
beforeEach(() => {
  t = 1_700_000_000_000;
});

const W = 10_000;
const make = (o: Partial<LimiterOptions> = {}) =>
  testLimiter({
    redis,
    names,
    windowMs: W,
    clock: () => t,
    maxPollMs: 10,
    limits: { tokens: 1_000 },
    ...o,
  });
const cost = (inputTokens: number, outputTokens: number) => ({
  requests: 1,
  inputTokens,
  outputTokens,
});

/** What Anthropic sends back: the tokens bucket, its remaining and when it is full again. */
const tokenHeaders = (
  limit: number,
  remaining: number,
  resetAt?: number,
): Record<string, string> => ({
  'anthropic-ratelimit-tokens-limit': String(limit),
  'anthropic-ratelimit-tokens-remaining': String(remaining),
  ...(resetAt === undefined
    ? {}
    : { 'anthropic-ratelimit-tokens-reset': new Date(resetAt).toISOString() }),
});

async function spend(lim: Limiter, input: number, output: number): Promise<Reservation> {
  const d = await lim.tryAcquire(cost(input, output));
  if (!d.ok) throw new Error(`expected admission, got ${JSON.stringify(d)}`);
  await lim.settle(d.reservation, { inputTokens: input, outputTokens: output });
  return d.reservation;
}

const foreign = async (lim: Limiter) =>
  (await lim.snapshot()).scopes.find((s) => s.scope === 'global')?.dimensions.tokens.foreign;

describe('observing the provider’s rate-limit headers', () => {
  it('takes a token reading within the provider’s rounding of our own count for ours, not another client’s', async () => {
    const lim = make({ limits: { tokens: 10_000 } });
    await spend(lim, 1_300, 1_300);
    // Only our 2,600 in the window: 7,400 left, which Anthropic rounds to 7,000.
    await lim.observe(tokenHeaders(10_000, 7_000, t + 5_000));
    await lim.observe(tokenHeaders(10_000, 7_000, t + 5_000));
    expect(await foreign(lim)).toBe(0);
    // Beyond the rounding it is someone else's: at least 4,000 − 2,600 − 500.
    await lim.observe(tokenHeaders(10_000, 6_000, t + 5_000));
    await lim.observe(tokenHeaders(10_000, 6_000, t + 5_000));
    expect(await foreign(lim)).toBe(900);
    // A reading that is not a multiple of 1,000 was not rounded: taken as it is.
    await lim.observe(tokenHeaders(10_000, 5_877, t + 5_000));
    await lim.observe(tokenHeaders(10_000, 5_877, t + 5_000));
    expect(await foreign(lim)).toBe(1_523);
  });

  it('does not let our calls still on their way hide another client’s spend', async () => {
    const lim = make();
    await spend(lim, 200, 100);
    // Admitted here, but no response has begun: the provider has not counted it yet.
    const onTheWay = await lim.tryAcquire(cost(100, 200));
    expect(onTheWay.ok).toBe(true);
    // The provider counts 300 of ours and 250 of someone else's: 450 left. Two readings agree
    // (one alone might have counted our call on its way).
    await lim.observe(tokenHeaders(1_000, 450, t + 5_000));
    await lim.observe(tokenHeaders(1_000, 450, t + 5_000));
    expect(await foreign(lim)).toBe(250);
    // Once its response has begun the provider counts it as ours: 300 more used, the same 250
    // of someone else's, not 550.
    if (onTheWay.ok) await lim.start(onTheWay.reservation);
    await lim.observe(tokenHeaders(1_000, 150, t + 5_000));
    expect(await foreign(lim)).toBe(250);
  });

  it('what may have been our own calls racing their headers counts only when two readings agree, until the next', async () => {
    const lim = make();
    // Admitted here, its response not begun: the provider's 700 left may or may not count it.
    const racing = await lim.tryAcquire(cost(100, 200));
    expect(racing.ok).toBe(true);
    // One reading alone holds nothing: our own call racing its stamp shows in one reading only.
    await lim.observe(tokenHeaders(1_000, 700, t + 9_000));
    expect(await foreign(lim)).toBe(0);
    // The next agrees (another client's spend would show in both): 300 may be foreign.
    await lim.observe(tokenHeaders(1_000, 700, t + 9_000));
    expect(await foreign(lim)).toBe(300);
    // Its response begins: the same 700 left is all ours, and nothing is held back.
    if (racing.ok) await lim.start(racing.reservation);
    await lim.observe(tokenHeaders(1_000, 700, t + 9_000));
    expect(await foreign(lim)).toBe(0);
    expect(await lim.tryAcquire(cost(400, 300))).toMatchObject({ ok: true });
  });

  it('takes a call stamped in the same moment as the reading for ours', async () => {
    const lim = make();
    const call = await lim.tryAcquire(cost(100, 200));
    expect(call.ok).toBe(true);
    // The response begins: the stamp and the reading go out together, as the worker sends them.
    // The provider counts the 300 as ours and nothing else: no foreign spend.
    if (call.ok)
      await Promise.all([
        lim.start(call.reservation),
        lim.observe(tokenHeaders(1_000, 700, t + 9_000)),
      ]);
    expect(await foreign(lim)).toBe(0);
  });

  it('takes a call that ended before its lazy stamp went for ours, when a reading comes while its settle waits', async () => {
    const lim = make();
    const [ended, other] = await lim.acquireMany(cost(100, 200), { more: [cost(100, 200)] });
    // The first call began and ended within the lazy stamp's wait: its settle will stamp it, and
    // waits for others. The other call began too, and its reading goes at once: the settle goes
    // ahead of it.
    const stamped = lim.start(ended!, { lazy: true });
    const otherStamped = lim.start(other!);
    const settled = lim.settle(ended!, { inputTokens: 100, outputTokens: 200 });
    const reading = lim.observe(tokenHeaders(1_000, 400, t + 9_000));
    await Promise.all([stamped, otherStamped, settled, reading]);
    // The provider counts both calls (600 used, 400 left): all ours, nothing foreign.
    expect(await foreign(lim)).toBe(0);
  });

  it("counts another client's spend when a call ended before the reading and its settle still waits", async () => {
    const lim = make({ limits: { tokens: 10_000 }, outputAccounting: 'actual' });
    const [ended, other] = await lim.acquireMany(cost(100, 1_000), { more: [cost(100, 100)] });
    await Promise.all([lim.start(ended!), lim.start(other!)]);
    // The first call ends having used 200 of its 1,100; its settle waits for company. The
    // other call's reading comes now: the provider has counted 1,300 (our 200 + 200, and 900 of
    // another client's).
    const settled = lim.settle(ended!, { inputTokens: 100, outputTokens: 100 });
    const reading = lim.observe(tokenHeaders(10_000, 8_700, t + 9_000));
    await Promise.all([settled, reading]);
    // Had the reading gone first, the window would still have held the 1,100 estimate where the
    // provider counted 200: the other client's 900 would have looked like ours, then vanished
    // with the settle.
    expect(await foreign(lim)).toBe(900);
  });

  it('takes the window as it was when the provider read it: a call that left it since is ours', async () => {
    const lim = make();
    await spend(lim, 300, 300);
    t += W + 500;
    // The reading was taken a second ago (the provider admitted its call then, and answered it
    // unstreamed): our 600 was still in its window, and nothing else.
    await lim.observe(tokenHeaders(1_000, 400, t + 5_000), 'global', undefined, 1_000);
    expect(await foreign(lim)).toBe(0);
    // Read now, the same 600 would be someone else's.
    await lim.observe(tokenHeaders(1_000, 400, t + 5_000));
    expect(await foreign(lim)).toBe(600);
  });

  it('still takes a call that left the window after the reading for ours when another worker dropped it first', async () => {
    const lim = make();
    await spend(lim, 300, 300);
    t += W + 500;
    // Another worker's acquire drops the call from the window before this reading arrives.
    const other = make();
    expect(await other.tryAcquire(cost(1, 1))).toMatchObject({ ok: true });
    await lim.observe(tokenHeaders(1_000, 398, t + 5_000), 'global', undefined, 1_000);
    // The provider's 602: our 600 and our new 2; nobody else.
    expect(await foreign(lim)).toBe(0);
  });

  it('counts output reserved for calls that gave it back after the reading was taken', async () => {
    const lim = make({ limits: { tokens: 10_000 }, outputAccounting: 'actual' });
    const [ended, carrier] = await lim.acquireMany(cost(100, 1_000), { more: [cost(100, 1_000)] });
    await Promise.all([lim.start(ended!), lim.start(carrier!)]);
    // The provider read 2,200 (both calls at max_tokens) when it admitted the carrier, 500 ms
    // ago; the first call has ended since, with 100 of its 1,000 output, given back here.
    t += 500;
    await lim.settle(ended!, { inputTokens: 100, outputTokens: 100 });
    await lim.observe(tokenHeaders(10_000, 7_800, t + 9_000), 'global', carrier, 500);
    expect(await foreign(lim)).toBe(0);
    // Another client's 700 in the same reading shows, all of it.
    await lim.observe(tokenHeaders(10_000, 7_100, t + 9_000), 'global', carrier, 500);
    expect(await foreign(lim)).toBe(700);
  });

  it('holds the highest reading until its reset even when later ones are lower, then the highest since', async () => {
    const lim = make();
    const t0 = t;
    // Another client holds 600 of the window, until +5 s.
    await lim.observe(tokenHeaders(1_000, 400, t0 + 5_000));
    expect(await foreign(lim)).toBe(600);
    // Its oldest call left the provider's window; it will most likely send another.
    t = t0 + 1_000;
    await lim.observe(tokenHeaders(1_000, 700, t0 + 6_000));
    expect(await foreign(lim)).toBe(600);
    // 600 + 500 is 100 too much: enough is free when the 600 steps down to the 300 seen since.
    expect(await lim.tryAcquire(cost(300, 200))).toMatchObject({ ok: false, waitMs: 4_000 });
    t = t0 + 2_000;
    await lim.observe(tokenHeaders(1_000, 900, t0 + 7_000));
    expect(await foreign(lim)).toBe(600);
    // The held reading lapses: the highest since (300, until +6 s) takes over, not the latest.
    t = t0 + 5_000;
    expect(await foreign(lim)).toBe(300);
    expect(await lim.tryAcquire(cost(300, 200))).toMatchObject({ ok: true });
    t = t0 + 6_000;
    expect(await foreign(lim)).toBe(0);
  });

  it('a reading above the held one replaces it at once', async () => {
    const lim = make();
    await lim.observe(tokenHeaders(1_000, 700, t + 5_000));
    t += 1_000;
    await lim.observe(tokenHeaders(1_000, 200, t + 5_000));
    expect(await foreign(lim)).toBe(800);
    expect(await lim.tryAcquire(cost(100, 150))).toMatchObject({ ok: false, waitMs: 5_000 });
  });

  it('headers that agree with our own spend change nothing', async () => {
    const lim = make();
    await spend(lim, 200, 100);
    await lim.observe(tokenHeaders(1_000, 700, t + 3_000));
    expect(await foreign(lim)).toBe(0);
    expect(await lim.tryAcquire(cost(400, 300))).toMatchObject({ ok: true });
  });

  it('use the provider reports beyond ours makes acquire wait until the provider’s reset', async () => {
    const lim = make();
    await spend(lim, 200, 100);
    // Another client spent 500 from the same key: the provider has 200 left, not 700.
    await lim.observe(new Headers(tokenHeaders(1_000, 200, t + 3_000)));
    expect(await foreign(lim)).toBe(500);
    const d = await lim.tryAcquire(cost(200, 100));
    expect(d).toMatchObject({ ok: false, reason: 'budget', scope: 'global', dimension: 'tokens' });
    // Nothing of ours leaves before the reset; at the reset the foreign 500 lapses.
    if (!d.ok) expect(d.waitMs).toBe(3_000);

    let admittedAt = 0;
    const waiting = lim.acquire(cost(200, 100)).then((r) => {
      admittedAt = r.admittedAt;
    });
    await new Promise((r) => setTimeout(r, 100));
    expect(admittedAt).toBe(0);
    t += 2_999;
    await new Promise((r) => setTimeout(r, 100));
    expect(admittedAt).toBe(0);
    t += 1;
    await waiting;
    expect(admittedAt).toBe(1_700_000_000_000 + 3_000);
    expect(await foreign(lim)).toBe(0);
  });

  it('foreign spend without a reset lapses after one window', async () => {
    const lim = make();
    await lim.observe(tokenHeaders(1_000, 100));
    expect(await lim.tryAcquire(cost(100, 100))).toMatchObject({ ok: false, waitMs: W });
    t += W - 1;
    expect(await lim.tryAcquire(cost(100, 100))).toMatchObject({ ok: false, waitMs: 1 });
    t += 1;
    expect(await lim.tryAcquire(cost(100, 100))).toMatchObject({ ok: true });
  });

  it('a reset later than one window is held to one window', async () => {
    const lim = make();
    await lim.observe(tokenHeaders(1_000, 100, t + 5 * W));
    t += W;
    expect(await lim.tryAcquire(cost(400, 400))).toMatchObject({ ok: true });
  });

  it('calls of ours that have left the window do not hide another client’s spend', async () => {
    const lim = make();
    await spend(lim, 300, 300);
    t += W;
    // Ours has left the window; the provider's 600 used is someone else's.
    await lim.observe(tokenHeaders(1_000, 400, t + 5_000));
    expect(await foreign(lim)).toBe(600);
    expect(await lim.tryAcquire(cost(300, 300))).toMatchObject({
      ok: false,
      reason: 'budget',
      waitMs: 5_000,
    });
  });

  it('calls of ours kept only by the window’s margin do not hide another client’s spend', async () => {
    // The limiter keeps a call 200 ms longer than the provider does (a stamp may be late).
    const lim = make({ windowMarginMs: 200 });
    await spend(lim, 200, 100);
    t += W + 100;
    // The provider has dropped our 300 and reopened that room; someone else took 400 of it.
    await lim.observe(tokenHeaders(1_000, 600, t + 5_000));
    expect(await foreign(lim)).toBe(400);
    // Ours still holds 300 here for 100 ms, and the other client's 400 is known: 300 is left.
    expect(await lim.tryAcquire(cost(200, 150))).toMatchObject({ ok: false, reason: 'budget' });
    t += 100;
    expect(await lim.tryAcquire(cost(200, 150))).toMatchObject({ ok: true });
    expect(await lim.tryAcquire(cost(200, 100))).toMatchObject({ ok: false, reason: 'budget' });
  });

  it('names the soonest moment the budget frees, counting what leaves the window and what lapses', async () => {
    const lim = make();
    await spend(lim, 100, 50); // 150, leaves at +10 s
    t += 1_000;
    await spend(lim, 200, 100); // 300, leaves at +11 s
    t += 1_000;
    // 100 of someone else's, until +11.5 s.
    await lim.observe(tokenHeaders(1_000, 450, t + 9_500));
    expect(await foreign(lim)).toBe(100);
    // 450 + 100 + 650 - 1000 = 200 too much: the first call leaving frees 150 (not enough
    // alone), the second frees 450 at +11 s, before the foreign spend lapses at +11.5 s.
    const d = await lim.tryAcquire(cost(400, 250));
    expect(d).toMatchObject({ ok: false, reason: 'budget' });
    if (!d.ok) expect(d.waitMs).toBe(11_000 + 1 - 2_000);
  });

  it('observes a nested scope on its own', async () => {
    const lim = make({ scopes: { 'tenant:a': { tokens: 500 } } });
    await lim.observe(tokenHeaders(500, 0, t + 2_000), 'tenant:a');
    expect(await lim.tryAcquire(cost(10, 10), { scopes: ['tenant:a'] })).toMatchObject({
      ok: false,
      scope: 'tenant:a',
      waitMs: 2_000,
    });
    expect(await lim.tryAcquire(cost(10, 10), { scopes: ['tenant:b'] })).toMatchObject({
      ok: true,
    });
    expect(await foreign(lim)).toBe(0);
  });
});
