import { describe, expect, it } from 'vitest';
import type { Dimension, LimiterSnapshot } from '../shared/limiter/types.ts';
import { acquireMany, callCost, eachTestLimiter, settle } from './helpers.ts';

const bed = eachTestLimiter('limscope', {
  limits: { tokens: 1_000, requests: 10 },
  scopes: {
    'tenant:a': { tokens: 400 },
    'tenant:b': { tokens: 400, requests: 2 },
    'team:x': { tokens: 300 },
  },
});

const make = bed.make;
const cost = callCost;
const used = (snap: LimiterSnapshot, scope: string, dim: Dimension = 'tokens') =>
  snap.scopes.find((s) => s.scope === scope)?.dimensions[dim].used ?? 0;

describe('nested scopes', () => {
  it('refuses a tenant at its limit while the global scope has room; the other tenant is still admitted', async () => {
    const lim = make();
    expect(await lim.tryAcquire(cost(100, 300), { scopes: ['tenant:a'] })).toMatchObject({
      ok: true,
    });
    const refused = await lim.tryAcquire(cost(50, 50), { scopes: ['tenant:a'] });
    expect(refused).toMatchObject({
      ok: false,
      reason: 'budget',
      scope: 'tenant:a',
      dimension: 'tokens',
    });
    expect(await lim.tryAcquire(cost(50, 50))).toMatchObject({ ok: true }); // the global has room
    expect(await lim.tryAcquire(cost(100, 300), { scopes: ['tenant:b'] })).toMatchObject({
      ok: true,
    });
    const snap = await lim.snapshot();
    expect([used(snap, 'global'), used(snap, 'tenant:a'), used(snap, 'tenant:b')]).toEqual([
      900, 400, 400,
    ]);
  });

  it("takes no provider's reading as a tenant's: the provider knows nothing of llmq's tenants", async () => {
    const lim = make();
    const d = await lim.tryAcquire(cost(10, 10), { scopes: ['tenant:a'] });
    if (!d.ok) throw new Error('expected admission');
    expect(() => lim.call(d.reservation, 'tenant:a')).toThrow(
      "a provider's readings describe its key, a model or a deployment, not a tenant: tenant:a",
    );
    await lim.release(d.reservation);
  });

  it('refuses a tenant with room when the global scope is full, and charges no scope for a refusal', async () => {
    const lim = make();
    expect(await lim.tryAcquire(cost(200, 200), { scopes: ['tenant:a'] })).toMatchObject({
      ok: true,
    });
    expect(await lim.tryAcquire(cost(300, 300))).toMatchObject({ ok: true });
    const refused = await lim.tryAcquire(cost(50, 50), { scopes: ['tenant:b'] });
    expect(refused).toMatchObject({
      ok: false,
      reason: 'budget',
      scope: 'global',
      dimension: 'tokens',
    });
    const snap = await lim.snapshot();
    expect(used(snap, 'tenant:b')).toBe(0);
    expect(used(snap, 'tenant:b', 'requests')).toBe(0);
    expect(used(snap, 'global')).toBe(1_000);
  });

  it('admits a call in several nested scopes only when every one has room, and charges each', async () => {
    const lim = make();
    expect(await lim.tryAcquire(cost(100, 100), { scopes: ['team:x'] })).toMatchObject({
      ok: true,
    });
    // tenant:a has room for 200 more, team:x only for 100.
    const refused = await lim.tryAcquire(cost(100, 100), { scopes: ['tenant:a', 'team:x'] });
    expect(refused).toMatchObject({ ok: false, reason: 'budget', scope: 'team:x' });
    const ok = await lim.tryAcquire(cost(50, 50), { scopes: ['tenant:a', 'team:x'] });
    expect(ok).toMatchObject({
      ok: true,
      reservation: { scopes: ['global', 'tenant:a', 'team:x'] },
    });
    const snap = await lim.snapshot();
    expect([used(snap, 'global'), used(snap, 'tenant:a'), used(snap, 'team:x')]).toEqual([
      300, 100, 300,
    ]);
  });

  it('counts each dimension of a scope on its own: a tenant out of requests is refused with tokens to spare', async () => {
    const lim = make();
    for (let i = 0; i < 2; i++) {
      const d = await lim.tryAcquire(cost(10, 10), { scopes: ['tenant:b'] });
      expect(d).toMatchObject({ ok: true });
      if (d.ok) await settle(lim, d.reservation, { inputTokens: 10, outputTokens: 10 });
    }
    expect(await lim.tryAcquire(cost(10, 10), { scopes: ['tenant:b'] })).toMatchObject({
      ok: false,
      scope: 'tenant:b',
      dimension: 'requests',
    });
    bed.now += 10_001;
    expect(await lim.tryAcquire(cost(10, 10), { scopes: ['tenant:b'] })).toMatchObject({
      ok: true,
    });
  });

  it('charges a scope named twice once', async () => {
    const lim = make();
    const d = await lim.tryAcquire(cost(100, 100), { scopes: ['tenant:a', 'tenant:a', 'global'] });
    expect(d).toMatchObject({ ok: true, reservation: { scopes: ['global', 'tenant:a'] } });
    const snap = await lim.snapshot();
    expect([used(snap, 'global'), used(snap, 'tenant:a')]).toEqual([200, 200]);
    if (d.ok) await lim.release(d.reservation);
    const after = await lim.snapshot();
    expect([used(after, 'global'), used(after, 'tenant:a')]).toEqual([0, 0]);
  });
});

describe("a scope's share of the slots (a pool's deployment)", () => {
  it('admits no more of its calls while as many as its slots wait for their first answer; an answer frees one', async () => {
    const lim = make({ concurrency: 4, scopeSlots: { 'deployment:a': 2 } });
    const a = { scopes: ['deployment:a'] };
    const first = await lim.tryAcquire(cost(10, 10), a);
    const second = await lim.tryAcquire(cost(10, 10), a);
    expect([first.ok, second.ok]).toEqual([true, true]);
    // Two of its calls wait for their first answer: a third is held, naming the scope…
    expect(await lim.tryAcquire(cost(10, 10), a)).toMatchObject({
      ok: false,
      reason: 'concurrency',
      scope: 'deployment:a',
    });
    // …while the fleet's other slots go to calls of another deployment.
    expect(await lim.tryAcquire(cost(10, 10), { scopes: ['deployment:b'] })).toMatchObject({
      ok: true,
    });
    // One answers (its response began): it no longer waits on the provider, a third may go.
    if (first.ok) await lim.call(first.reservation).begin();
    expect(await lim.tryAcquire(cost(10, 10), a)).toMatchObject({ ok: true });
    expect(await lim.tryAcquire(cost(10, 10), a)).toMatchObject({
      ok: false,
      reason: 'concurrency',
    });
  });

  it('counts the calls admitted with the head in one acquire', async () => {
    const lim = make({ scopeSlots: { 'deployment:a': 2 } });
    const scopes = ['deployment:a'];
    const got = await acquireMany(
      lim,
      { ...cost(10, 10), scopes },
      {
        scopes,
        more: [1, 2, 3].map(() => ({ ...cost(10, 10), scopes })),
      },
    );
    expect(got).toHaveLength(2);
  });

  it('holds a call past its first lease while it is renewed; one that lapses or ends frees its place', async () => {
    const lim = make({ scopeSlots: { 'deployment:a': 2 }, leaseMs: 1_000 });
    const a = { scopes: ['deployment:a'] };
    const renewed = await lim.tryAcquire(cost(10, 10), a);
    const lapsing = await lim.tryAcquire(cost(10, 10), a);
    if (!renewed.ok || !lapsing.ok) throw new Error('expected both admitted');
    bed.now += 800;
    expect(await lim.renew(renewed.reservation)).toBe(true);
    bed.now += 400; // the second's lease lapsed; the renewed one still waits for its answer
    const third = await lim.tryAcquire(cost(10, 10), a);
    expect(third).toMatchObject({ ok: true });
    expect(await lim.tryAcquire(cost(10, 10), a)).toMatchObject({
      ok: false,
      reason: 'concurrency',
      scope: 'deployment:a',
    });
    if (third.ok) await lim.release(third.reservation);
    expect(await lim.tryAcquire(cost(10, 10), a)).toMatchObject({ ok: true });
  });

  it('keeps nothing once its calls have answered', async () => {
    const lim = make({ scopeSlots: { 'deployment:a': 2 } });
    const d = await lim.tryAcquire(cost(10, 10), { scopes: ['deployment:a'] });
    if (!d.ok) throw new Error('expected admission');
    const key = `${bed.names.prefix}:{${bed.names.queue}}:limiter:slots:deployment:a`;
    expect(await bed.redis.zcard(key)).toBe(1);
    // It lives no longer than the lease of the call it holds.
    expect(await bed.redis.pttl(key)).toBeGreaterThan(0);
    await lim.call(d.reservation).begin();
    expect(await bed.redis.exists(key)).toBe(0);
  });

  it('refuses a share that is not a whole number of slots', () => {
    expect(() => make({ scopeSlots: { 'deployment:a': 1.5 } })).toThrow(
      'scopeSlots["deployment:a"] must be a whole number from 0 up, got 1.5',
    );
  });
});
