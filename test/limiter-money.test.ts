import type { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BudgetExhaustedError, BudgetLedger, type BudgetSettings } from '../shared/budgets.ts';
import type { QueueNames } from '../shared/keys.ts';
import { Limiter } from '../shared/limiter/limiter.ts';
import type { Reservation } from '../shared/limiter/types.ts';
import { costMicros } from '../shared/prices.ts';
import { type LimiterChild, spawnLimiterChild } from './fixtures/limiter-support.ts';
import {
  acquireMany,
  deleteKeys,
  keep,
  newRedis,
  REDIS_URL,
  settle,
  testNames,
  until,
} from './helpers.ts';

/*
 * Money held with admission: the limiter's acquire admits tokens, slot and a call's worst-case
 * cost together, or none of them.
 */

const MODEL = 'claude-test-1';
/** $3 / $15 per million: a call of 100 in, 200 out costs at most 3,300 µ$. */
const PRICE = { input: 3, output: 15 };
const COST = { requests: 1, inputTokens: 100, outputTokens: 200 };
const WORST = 100 * 3 + 200 * 15;

function settings(budgets: BudgetSettings['budgets']): BudgetSettings {
  return { budgets, policy: 'wait', prices: { [MODEL]: PRICE } };
}

let redis: Redis;
let names: QueueNames;
const closing: (() => unknown)[] = [];
beforeEach(() => {
  redis = newRedis();
  names = testNames('limmoney');
});
afterEach(async () => {
  for (const c of closing.splice(0)) await c();
  await deleteKeys(redis, names.prefix);
  redis.disconnect();
});

/** A limiter on a connection of its own, as each worker process has. */
function workerLimiter(options: Partial<ConstructorParameters<typeof Limiter>[0]> = {}): Limiter {
  const own = newRedis();
  closing.push(() => own.disconnect());
  return new Limiter({
    redis: own,
    names,
    windowMs: 60_000,
    limits: { tokens: 1_000_000 },
    ...options,
  });
}

const day = (s: Awaited<ReturnType<BudgetLedger['spend']>>, name: string) => s.day[name] ?? 0;

describe('money held with admission', () => {
  it('concurrent acquires from many workers against a budget of exactly 5 worst cases: 5 admitted, the rest refused holding no tokens or slot', async () => {
    const budgets = settings({ 'tenant:a': { day: (5 * WORST) / 1e6 } });
    const ledger = new BudgetLedger(redis, names, budgets);
    const limiters = Array.from({ length: 6 }, () => workerLimiter({ concurrency: 50 }));
    // 24 calls at once, 4 from each of 6 workers, each one's worst case claimed with it.
    const outcomes = await Promise.allSettled(
      limiters.flatMap((l) =>
        Array.from({ length: 4 }, () =>
          l.acquire({ ...COST, money: ledger.claim(MODEL, 'a', COST) }, { scopes: ['tenant:a'] }),
        ),
      ),
    );
    const admitted = outcomes.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []));
    const refused = outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason] : []));
    expect(admitted).toHaveLength(5);
    expect(refused).toHaveLength(19);
    for (const e of refused) {
      expect(e).toBeInstanceOf(BudgetExhaustedError);
      expect((e as Error).message).toMatch(/the daily budget "tenant:a" of \$0\.0165 is spent/);
    }
    // Exactly the admitted calls hold tokens, slots and money: nothing was left by a refusal.
    const snap = await limiters[0]!.snapshot();
    const tokens = (scope: string) =>
      snap.scopes.find((s) => s.scope === scope)?.dimensions.tokens.used;
    expect(tokens('global')).toBe(5 * 300);
    expect(tokens('tenant:a')).toBe(5 * 300);
    expect(snap.inFlight).toBe(5);
    expect(snap.waiters).toBe(0);
    const spend = await ledger.spend();
    expect(day(spend, 'tenant:a')).toBe(5 * WORST);
    expect(day(spend, `model:${MODEL}`)).toBe(5 * WORST);
    // Another tenant, without a budget of its own, still gets in.
    const b = await limiters[1]!.tryAcquire({ ...COST, money: ledger.claim(MODEL, 'b', COST) });
    expect(b.ok).toBe(true);
  });

  it('settle makes spend usage × price to the micro-dollar; release gives it back; keep leaves the worst case', async () => {
    const budgets = settings({ global: { day: 1, month: 10 } });
    const ledger = new BudgetLedger(redis, names, budgets);
    const lim = workerLimiter();
    closing.push(() => lim.close());
    const take = async () => {
      const d = await lim.tryAcquire({ ...COST, money: ledger.claim(MODEL, undefined, COST) });
      if (!d.ok) throw new Error(`expected admission, got ${d.reason}`);
      return d.reservation;
    };
    const [a, b, c, d] = [await take(), await take(), await take(), await take()];
    expect(day(await ledger.spend(), 'global')).toBe(4 * WORST);
    const usage = [
      { input_tokens: 87, output_tokens: 13 },
      { input_tokens: 91, output_tokens: 177, cache_creation_input_tokens: 9 },
    ];
    const settleTo = (r: Reservation, u: (typeof usage)[number]) =>
      settle(lim, r, {
        inputTokens: u.input_tokens + (u.cache_creation_input_tokens ?? 0),
        outputTokens: u.output_tokens,
        costMicros: costMicros(PRICE, u),
      });
    await Promise.all([
      settleTo(a, usage[0]!),
      settleTo(b, usage[1]!),
      lim.release(c),
      keep(lim, d),
    ]);
    const expected = costMicros(PRICE, usage[0]!) + costMicros(PRICE, usage[1]!) + WORST;
    const spend = await ledger.spend();
    expect(day(spend, 'global')).toBe(expected);
    expect(spend.month['global']).toBe(expected);
    expect(day(spend, `model:${MODEL}`)).toBe(expected);
    // Settled twice (a retried command), it does not move again.
    await settleTo(a, usage[0]!);
    expect(day(await ledger.spend(), 'global')).toBe(expected);
  });

  it('a worker process killed after admission gives its money back with its lease', async () => {
    const budgets = settings({ 'tenant:a': { day: (2 * WORST) / 1e6 } });
    const ledger = new BudgetLedger(redis, names, budgets);
    const options = {
      concurrency: 4,
      leaseMs: 1_000,
      windowMs: 60_000,
      limits: { tokens: 100_000 },
    };
    const child: LimiterChild = spawnLimiterChild({ redisUrl: REDIS_URL, names, options });
    closing.push(() => child.kill());
    await child.next('ready');
    child.send({ op: 'acquire', cost: { ...COST, money: ledger.claim(MODEL, 'a', COST) } });
    await child.next('acquired');
    expect(day(await ledger.spend(), 'tenant:a')).toBe(WORST);
    await child.kill('SIGKILL');

    // Until its lease lapses the dead call's money is held: one more call fits, not two.
    const lim = workerLimiter({ ...options, leaseMs: 600_000 });
    const claim = () => ({ ...COST, money: ledger.claim(MODEL, 'a', COST) });
    const first = await lim.tryAcquire(claim());
    expect(first.ok).toBe(true);
    expect(await lim.tryAcquire(claim())).toMatchObject({ ok: false, reason: 'money' });
    // Once it lapses, its money comes back (an idle worker's prune sees to it).
    await until(async () => {
      await lim.prune();
      return day(await ledger.spend(), 'tenant:a') === WORST;
    }, 10_000);
    expect(await lim.tryAcquire(claim())).toMatchObject({ ok: true });
    // Its tokens stay in the window (the call may have reached the provider).
    const snap = await lim.snapshot();
    expect(snap.scopes.find((s) => s.scope === 'global')?.dimensions.tokens.used).toBe(3 * 300);
  });

  it('the calls queued behind are admitted in one round trip, each with its own money and scopes, until one does not fit', async () => {
    const budgets = settings({ 'tenant:a': { day: (2 * WORST) / 1e6 } });
    const ledger = new BudgetLedger(redis, names, budgets);
    const lim = workerLimiter({ concurrency: 10 });
    const of = (tenant: string) => ({
      ...COST,
      money: ledger.claim(MODEL, tenant, COST),
      scopes: [`tenant:${tenant}`],
    });
    // a, b, a fit; the third a has no money left, so the b behind it waits for the next round.
    const rs = await acquireMany(lim, of('a'), {
      scopes: ['tenant:a'],
      more: [of('b'), of('a'), of('a'), of('b')],
    });
    expect(rs.map((r) => r.scopes)).toEqual([
      ['global', 'tenant:a'],
      ['global', 'tenant:b'],
      ['global', 'tenant:a'],
    ]);
    const snap = await lim.snapshot();
    const tokens = (scope: string) =>
      snap.scopes.find((s) => s.scope === scope)?.dimensions.tokens.used;
    expect(tokens('tenant:a')).toBe(600);
    expect(tokens('tenant:b')).toBe(300);
    expect(snap.inFlight).toBe(3);
    const spend = await ledger.spend();
    expect(day(spend, 'tenant:a')).toBe(2 * WORST);
    expect(day(spend, `model:${MODEL}`)).toBe(3 * WORST);
  });

  it('a worst case larger than the budget is refused as never fitting', async () => {
    const budgets = settings({ global: { day: (WORST - 1) / 1e6 } });
    const ledger = new BudgetLedger(redis, names, budgets);
    const lim = workerLimiter();
    const err = await lim
      .acquire({ ...COST, money: ledger.claim(MODEL, undefined, COST) })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BudgetExhaustedError);
    expect((err as BudgetExhaustedError).resetsAt).toBeUndefined();
    expect((await lim.snapshot()).inFlight).toBe(0);
  });
});
