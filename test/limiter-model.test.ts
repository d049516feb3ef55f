import fc from 'fast-check';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CostExceedsLimitError } from '../shared/errors.ts';
import type { QueueNames } from '../shared/keys.ts';
import type { CallHandle } from '../shared/limiter/call.ts';
import { Limiter } from '../shared/limiter/limiter.ts';
import { limiterKeys } from '../shared/limiter/limiter-keys.ts';
import type {
  Decision,
  DimensionLimits,
  OutputAccounting,
  Reservation,
} from '../shared/limiter/types.ts';
import {
  createRateLimiter,
  type LimitTicket,
  type Charge as ProviderCharge,
  type RateLimiter,
} from '../testing/mock-anthropic/rate-limits.ts';
import { deleteKeys, newRedis, rateHeaders, testNames } from './helpers.ts';

/*
 * The limiter against a small reference model of its rules (docs/limiter.md), on random
 * sequences of operations against the real Redis with an injected clock:
 *
 * 1. Agreement: every decision (admitted; or paused / budget with its scope, dimension and wait /
 *    concurrency / never fits), every settle's answer and every snapshot (our window, the
 *    provider's limit and projected room, the shape, the pause, calls in flight) equals the
 *    model's, with provider readings drawn at random (any limit, remaining, reset).
 * 2. Safety, what a user would notice: at the default headroom (0), with readings from a
 *    provider of either shape (the mock's exact sliding window or its token bucket, the
 *    configured limits), exact or rounded as the API rounds them, and another client spending
 *    on the same key, the provider admits every call llmq admits once llmq has read a reading
 *    taken after the other client's last spend.
 *
 * Leases are far longer than a run (a lapsed lease is another contract).
 */

type Dim = 'req' | 'in' | 'out' | 'tok';
const DIMS: readonly Dim[] = ['req', 'in', 'out', 'tok'];
const DIM_NAME = {
  req: 'requests',
  in: 'inputTokens',
  out: 'outputTokens',
  tok: 'tokens',
} as const;
const HEADER: Record<Dim, string> = {
  req: 'requests',
  in: 'input-tokens',
  out: 'output-tokens',
  tok: 'tokens',
};
const NESTED = ['tenant:a', 'team:x'] as const;
const ALL_SCOPES = ['global', ...NESTED] as const;
const WINDOW = 10_000;
/** How soon a head behind a probe tries again without a wake-up (acquire-13.lua). */
const PROBE_RETRY_MS = 250;
const LEASE = 1_000_000_000;

interface Config {
  readonly accounting: OutputAccounting;
  readonly headroom: number;
  readonly concurrency: number;
  readonly limits: Record<string, DimensionLimits>;
}

type Amounts = Record<'req' | 'in' | 'out', number>;
const amount = (a: Amounts, d: Dim) => (d === 'tok' ? a.in + a.out : a[d]);

/** One entry of the log: a reservation or its input part (`<id>:in`). */
interface Entry {
  readonly id: string;
  a: Amounts;
  /** '' open, 's' stamped, 'b' begun with its input apart. */
  flags: '' | 's' | 'b';
  /** Stamped, and its answer brought a reading. */
  read?: boolean;
  score: number;
  readonly scopes: readonly string[];
  /** When its request was sent: admitted, until its stamp tells. */
  sent: number;
}

interface View {
  lim: number;
  rem: number;
  at: number;
  seen: number;
  gone: number;
  /** What it counted of ours that had left the provider's window before it. */
  drop: number;
  /** When its call was sent. */
  sent: number;
  /** Another client's spend, at the least, by the last reading; its largest rise, and when. */
  fmin: number;
  rise: number;
  riseAt: number;
}

interface ReadingDim {
  limit: number;
  remaining: number;
  reset: number;
}

/** The rules, once more, in TypeScript: what the Lua scripts must agree with. */
class Model {
  now: number;
  pausedUntil = 0;
  readonly entries = new Map<string, Entry>();
  readonly slots = new Map<string, number>();
  readonly left = new Map<string, number>();
  readonly views = new Map<string, View>();
  readonly shape = new Map<string, string>();
  readonly step = new Map<string, number>();
  readonly readingsGcd = new Map<string, number>();
  /** The call out as the probe of a scope's last room. */
  readonly probes = new Map<string, string>();
  /** The scopes whose last room the call acquire admitted goes into (admit makes it their probe). */
  private lastRooms: string[] = [];

  constructor(
    readonly cfg: Config,
    now: number,
  ) {
    this.now = now;
  }

  conf(scope: string, d: Dim): number {
    return this.cfg.limits[scope]?.[DIM_NAME[d]] ?? 0;
  }

  used(scope: string, d: Dim): number {
    let u = 0;
    for (const e of this.entries.values()) if (e.scopes.includes(scope)) u += amount(e.a, d);
    return u;
  }

  /**
   * What left our window goes to `left`. A reading that counted it (stamped by then) although
   * it was admitted a window or more before the reading's call was sent (the provider may have
   * dropped it already) takes it into `drop`: its room must not come back twice.
   */
  expire(): void {
    for (const [id, e] of [...this.entries]) {
      if (e.score > this.now - WINDOW) continue;
      for (const s of e.scopes)
        for (const d of DIMS) {
          const f = `${s}|${d}`;
          this.left.set(f, (this.left.get(f) ?? 0) + amount(e.a, d));
          const v = this.views.get(f);
          if (v && this.now < v.at + WINDOW && e.score <= v.at && e.sent <= v.sent - WINDOW)
            v.drop += amount(e.a, d);
        }
      this.entries.delete(id);
    }
  }

  limitOf(scope: string, d: Dim): { lim: number; v: View | undefined; most: number } {
    const v = this.views.get(`${scope}|${d}`);
    let lim = this.conf(scope, d);
    if (v && v.lim > 0 && (lim === 0 || v.lim < lim)) lim = v.lim;
    const most = lim > 0 ? Math.max(1, Math.floor(lim * (1 - this.cfg.headroom))) : 0;
    return { lim, v, most };
  }

  /** The provider's room now and its refill per ms; undefined when no reading is fresh. */
  projected(scope: string, d: Dim, v: View | undefined, used: number) {
    if (!v || this.now >= v.at + WINDOW) return undefined;
    const half = d === 'req' ? 0 : Math.floor((this.step.get(scope) ?? 0) / 2);
    const left = this.left.get(`${scope}|${d}`) ?? 0;
    if (this.shape.get(scope) === 'b') {
      const rate = v.lim / WINDOW;
      const level = Math.min(v.lim, v.rem - half + rate * (this.now - v.at));
      return { room: level - (used + left - v.seen), rate };
    }
    const ours = v.seen - v.gone - v.drop;
    return { room: Math.min(v.lim, v.rem - half + ours) - used, rate: 0 };
  }

  lack(scope: string, d: Dim, a: Amounts) {
    const { lim, v, most } = this.limitOf(scope, d);
    if (lim === 0) return { need: -1, rate: 0, lapse: 0 };
    const used = this.used(scope, d);
    const p = this.projected(scope, d, v, used);
    const conf = this.conf(scope, d);
    let need = -1;
    let rate = 0;
    let lapse = 0;
    if (!(p && p.rate > 0 && (conf === 0 || conf >= v!.lim))) need = used + amount(a, d) - most;
    if (p) {
      const n = amount(a, d) - p.room + Math.floor(v!.lim * this.cfg.headroom);
      if (n > need) [need, rate, lapse] = [n, p.rate, v!.at + WINDOW];
    }
    return { need, rate, lapse };
  }

  waitFor(scope: string, d: Dim, need: number, rate: number, lapse: number): number {
    let most = WINDOW;
    if (lapse > 0) most = Math.max(1, Math.min(most, lapse - this.now));
    if (rate > 0) return Math.max(1, Math.min(most, Math.ceil(need / rate)));
    const sorted = [...this.entries.values()]
      .filter((e) => e.score <= this.now + most - WINDOW)
      .sort((x, y) => x.score - y.score);
    let freed = 0;
    for (const e of sorted) {
      if (!e.scopes.includes(scope)) continue;
      freed += amount(e.a, d);
      if (freed >= need) return Math.max(1, e.score + WINDOW - this.now);
    }
    return most;
  }

  /** What tryAcquire must answer. */
  acquire(a: Amounts, scopes: readonly string[]): Decision | 'exceeds' | 'admit' {
    for (const s of scopes)
      for (const d of DIMS) {
        const { most } = this.limitOf(s, d);
        if (most > 0 && amount(a, d) > most) return 'exceeds';
      }
    this.expire();
    if (this.pausedUntil > this.now)
      return { ok: false, reason: 'paused', waitMs: this.pausedUntil - this.now };
    for (const s of scopes)
      for (const d of DIMS) {
        const { need, rate, lapse } = this.lack(s, d, a);
        if (need > 0) {
          const waitMs = this.waitFor(s, d, need, rate, lapse);
          return { ok: false, reason: 'budget', waitMs, scope: s, dimension: DIM_NAME[d] };
        }
      }
    this.lastRooms = this.lastRoomsOf(a, scopes);
    const out = this.lastRooms.find((s) => this.probes.has(s));
    if (out) return { ok: false, reason: 'concurrency', waitMs: PROBE_RETRY_MS, scope: out };
    const live = [...this.slots.values()].filter((end) => end > this.now);
    if (this.cfg.concurrency > 0 && live.length >= this.cfg.concurrency)
      return {
        ok: false,
        reason: 'concurrency',
        waitMs: Math.max(Math.min(...live) - this.now, 1),
      };
    return 'admit';
  }

  /**
   * Beside another client's spend on a window, the scopes where `a` goes into the last of the room
   * (that spend's largest rise from one reading to the next, for a window): it goes as a probe,
   * one at a time a scope, the next once the last one's answer began or it ended.
   */
  lastRoomsOf(a: Amounts, scopes: readonly string[]): string[] {
    return scopes.filter((s) =>
      DIMS.some((d) => {
        const v = this.views.get(`${s}|${d}`);
        if (!v || v.rise <= 0 || this.now >= v.riseAt + WINDOW || this.shape.get(s) !== 'w')
          return false;
        return this.limitOf(s, d).lim > 0 && this.lack(s, d, a).need + v.rise > 0;
      }),
    );
  }

  endProbes(id: string): void {
    for (const [s, probe] of [...this.probes]) if (probe === id) this.probes.delete(s);
  }

  admit(id: string, a: Amounts, scopes: readonly string[]): void {
    for (const s of this.lastRooms) this.probes.set(s, id);
    this.lastRooms = [];
    const entry = { id, a: { ...a }, flags: '' as const, score: this.now + LEASE, scopes };
    this.entries.set(id, { ...entry, sent: this.now });
    this.slots.set(id, this.now + LEASE);
  }

  begin(
    id: string,
    reading: { scope: string; dims: Partial<Record<Dim, ReadingDim>> } | null,
    ageMs = 0,
  ) {
    this.expire();
    const e = this.entries.get(id);
    if (e && e.flags === '') {
      this.endProbes(id);
      e.sent = Math.max(e.sent, this.now - Math.max(0, Math.min(ageMs, WINDOW)));
      if (this.cfg.accounting === 'produced') {
        const part = { req: e.a.req, in: e.a.in, out: 0 };
        this.entries.set(`${id}:in`, {
          id: `${id}:in`,
          a: part,
          flags: 's',
          score: this.now,
          scopes: e.scopes,
          sent: e.sent,
        });
        e.a = { req: 0, in: 0, out: e.a.out };
        e.flags = 'b';
      } else {
        e.flags = 's';
        e.score = this.now;
      }
    }
    if (reading) this.read(id, reading, ageMs);
  }

  /** The reading call `id`'s answer brought, sent `ageMs` ago; its stamped entries are read. */
  read(id: string, reading: { scope: string; dims: Partial<Record<Dim, ReadingDim>> }, ageMs = 0) {
    this.observe(reading.scope, reading.dims, ageMs, id);
    for (const key of [id, `${id}:in`]) {
      const own = this.entries.get(key);
      if (own?.flags === 's') own.read = true;
    }
  }

  end(id: string, mode: 'usage' | 'keep' | 'release', use?: { in: number; out: number }) {
    this.expire();
    this.slots.delete(id);
    const e = this.entries.get(id);
    if (!e) return { known: false, inputDelta: 0, outputDelta: 0 };
    this.endProbes(id);
    const part = e.flags === 'b' ? this.entries.get(`${id}:in`) : undefined;
    if (mode === 'release') {
      this.entries.delete(id);
      this.entries.delete(`${id}:in`);
      return { known: true, inputDelta: -(e.a.in + (part?.a.in ?? 0)), outputDelta: -e.a.out };
    }
    const holder = part ?? (e.flags !== 'b' ? e : undefined);
    const dIn = holder && mode === 'usage' ? use!.in - holder.a.in : 0;
    const dOut = mode === 'usage' && this.cfg.accounting !== 'reserve' ? use!.out - e.a.out : 0;
    // A reading that may have counted the call counted its input as it was: an estimate above it
    // moves its count of ours down; one below stays charged. The unused output goes back into
    // its bucket.
    const down = Math.min(dIn, 0);
    const refund = e.flags === 's' && dOut < 0 ? dOut : 0;
    if (holder && (dIn !== 0 || refund < 0) && holder.flags === 's')
      for (const s of e.scopes)
        for (const [d, seen, rem] of [
          ['in', down, 0],
          ['out', refund, refund],
          ['tok', down + refund, refund],
        ] as const) {
          const v = this.views.get(`${s}|${d}`);
          if (!v || holder.score > v.at) continue;
          v.seen += seen;
          v.rem -= rem;
        }
    if (holder) holder.a.in += dIn;
    e.a.out += dOut;
    if (e.flags !== 's') e.score = this.now;
    e.flags = 's';
    return { known: true, inputDelta: dIn, outputDelta: dOut };
  }

  /**
   * Ours the reading of call `id` (sent at `since`) may not have counted: calls not begun (with
   * `produced`, output still to come), and calls begun since without a reading (`late`). Its own
   * call it counted.
   */
  private uncounted(scope: string, since: number, id: string) {
    const pending = { req: 0, in: 0, out: 0, tok: 0 };
    const late = { req: 0, in: 0, out: 0, tok: 0 };
    for (const e of this.entries.values()) {
      if (e.score <= since || !e.scopes.includes(scope)) continue;
      if ((e.id === id || e.id === `${id}:in`) && e.flags === 's') continue;
      if (e.flags === 's' && e.read) continue;
      const t = e.flags === 's' ? late : pending;
      for (const d of DIMS) t[d] += amount(e.a, d);
    }
    return { pending, late };
  }

  /**
   * Whether the stored reading stands against `fresh`: of readings of calls in flight together
   * (stored since fresh's call was sent), the one that leaves less room stands (another client
   * may have spent between them).
   */
  private stands(scope: string, d: Dim, fresh: View, since: number): boolean {
    const v = this.views.get(`${scope}|${d}`);
    if (!v || v.at <= since || v.lim !== fresh.lim) return false;
    const used = this.used(scope, d);
    const old = this.projected(scope, d, v, used);
    return old !== undefined && old.room < this.projected(scope, d, fresh, used)!.room;
  }

  /** The reading of call `id`, sent `ageMs` ago. */
  observe(scope: string, dims: Partial<Record<Dim, ReadingDim>>, ageMs: number, id: string) {
    this.expire();
    const age = Math.max(0, Math.min(ageMs, WINDOW));
    const { pending, late } = this.uncounted(scope, this.now - age, id);
    const gcd = (x: number, y: number): number => (y > 0 ? gcd(y, x % y) : x);
    // The readings' gcd, negative while one value was read: the limit then stands in.
    let rg = this.readingsGcd.get(scope) ?? 0;
    let lim = 0;
    for (const d of DIMS) {
      const r = dims[d];
      if (!r || d === 'req' || r.remaining <= 0) continue;
      rg = rg === 0 || rg === -r.remaining ? -r.remaining : gcd(Math.abs(rg), r.remaining);
      lim = r.limit;
    }
    const step = rg < 0 ? gcd(lim, -rg) : rg;
    if (step > 0) this.readingsGcd.set(scope, rg);
    let shape: string | undefined;
    for (const d of DIMS) {
      const r = dims[d];
      if (!r) continue;
      const half = d !== 'req' ? Math.floor(step / 2) : 0;
      const f = `${scope}|${d}`;
      const left = this.left.get(f) ?? 0;
      const seen = this.used(scope, d) + left - pending[d] - late[d];
      const gone = left;
      const sent = this.now - age;
      // Another client's spend at the least: the count at its rounding's high end, less all of
      // ours the provider can have counted. Its rise since the last reading is kept, the largest
      // for a window.
      const prev = this.views.get(f);
      const fmin = Math.max(0, r.limit - r.remaining - half - (this.used(scope, d) - pending[d]));
      let [rise, riseAt] = [0, 0];
      if (prev && this.now < prev.riseAt + WINDOW) [rise, riseAt] = [prev.rise, prev.riseAt];
      if (prev && this.now < prev.at + WINDOW && fmin - prev.fmin >= Math.max(rise, 1))
        [rise, riseAt] = [fmin - prev.fmin, this.now];
      const foreign = { fmin, rise, riseAt };
      const fresh = { lim: r.limit, rem: r.remaining, at: this.now, seen, gone, drop: 0, sent };
      if (!this.stands(scope, d, { ...fresh, ...foreign }, this.now - age))
        this.views.set(f, { ...fresh, ...foreign });
      else Object.assign(prev!, foreign);
      if (r.reset > 0 && r.limit > 0) {
        const slack = 1000 + (2 * half * WINDOW) / r.limit + age;
        const untilReset = r.reset - (this.now - age);
        const full = ((r.limit - r.remaining) * WINDOW) / r.limit;
        const bucket = Math.abs(untilReset - full) <= slack;
        const window = untilReset >= WINDOW - slack;
        if (bucket !== window) shape = bucket ? 'b' : 'w';
      }
    }
    if (step > 0) this.step.set(scope, step);
    if (shape) this.shape.set(scope, shape);
  }

  /** Our window as a snapshot reads it (what left is out, though not dropped). */
  snapshotUsed(scope: string, d: Dim): number {
    let u = 0;
    for (const e of this.entries.values())
      if (e.scopes.includes(scope) && e.score > this.now - WINDOW) u += amount(e.a, d);
    return u;
  }
}

const limitsArb = (lo: number, hi: number): fc.Arbitrary<DimensionLimits> =>
  fc.record(
    {
      requests: fc.constantFrom(1, 3, 7, 20),
      inputTokens: fc.integer({ min: lo, max: hi }),
      outputTokens: fc.integer({ min: lo, max: hi }),
      tokens: fc.integer({ min: lo, max: 2 * hi }),
    },
    { requiredKeys: [] },
  );

const configArb = (accounting: OutputAccounting): fc.Arbitrary<Config> =>
  fc.record({
    accounting: fc.constant(accounting),
    headroom: fc.constantFrom(0, 0, 0.01, 0.1),
    concurrency: fc.constantFrom(0, 0, 2, 4),
    limits: fc.record({
      global: limitsArb(1_000, 4_000),
      'tenant:a': limitsArb(800, 2_000),
      'team:x': limitsArb(800, 3_000),
    }),
  });

type Op =
  | { kind: 'acquire'; req: number; in: number; out: number; scopes: string[] }
  | { kind: 'begin'; pick: number; reading: ReadingArb | null; ageMs: number }
  | { kind: 'beginTogether'; begins: { pick: number; reading: ReadingArb | null; ageMs: number }[] }
  | { kind: 'settle'; pick: number; inPct: number; outPct: number }
  | { kind: 'keep' | 'release'; pick: number }
  | { kind: 'advance'; ms: number }
  | { kind: 'pause'; ms: number }
  | { kind: 'check' };

interface ReadingArb {
  scope: string;
  dims: {
    dim: Dim;
    limit: number;
    remainingPct: number;
    resetIn: number | 'full' | null;
    round: number;
  }[];
}

const pick = fc.nat({ max: 1_000 });
const tokensArb = fc.oneof(
  { weight: 9, arbitrary: fc.integer({ min: 0, max: 400 }) },
  { weight: 1, arbitrary: fc.integer({ min: 0, max: 1_500 }) },
);
const readingArb: fc.Arbitrary<ReadingArb> = fc.record({
  // A provider's reading describes its key or a scope of its own, never one of llmq's tenants.
  scope: fc.constantFrom(...ALL_SCOPES.filter((s) => !s.startsWith('tenant:'))),
  dims: fc.uniqueArray(
    fc.record({
      dim: fc.constantFrom(...DIMS),
      limit: fc.constantFrom(1_000, 2_000, 4_000, 3_977),
      remainingPct: fc.integer({ min: 0, max: 100 }),
      // 'full': when a bucket would be full again, as a token bucket says.
      resetIn: fc.option(
        fc.oneof(fc.integer({ min: -2_000, max: 2 * WINDOW }), fc.constant('full' as const)),
        { nil: null },
      ),
      round: fc.constantFrom(1, 1, 100),
    }),
    { selector: (x) => x.dim, minLength: 1, maxLength: 4 },
  ),
});
const beginArb = fc.record({
  pick,
  reading: fc.option(readingArb, { nil: null }),
  // How long ago the call was sent: an answer that took long may bring older news.
  ageMs: fc.constantFrom(0, 0, 1, 300, 4_000),
});
const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 10,
    arbitrary: fc.record({
      kind: fc.constant('acquire' as const),
      req: fc.constantFrom(1, 1, 1, 0, 2),
      in: tokensArb,
      out: tokensArb,
      scopes: fc.shuffledSubarray([...NESTED]),
    }),
  },
  {
    weight: 4,
    arbitrary: beginArb.map((b) => ({ kind: 'begin' as const, ...b })),
  },
  {
    // Answers that arrive together: their stamps, then their readings, in one record run.
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('beginTogether' as const),
      begins: fc.array(beginArb, { minLength: 2, maxLength: 3 }),
    }),
  },
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant('settle' as const),
      pick,
      inPct: fc.oneof(fc.constant(100), fc.integer({ min: 0, max: 150 })),
      outPct: fc.oneof(fc.constant(100), fc.integer({ min: 0, max: 100 })),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('keep' as const), pick }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('release' as const), pick }) },
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('advance' as const),
      ms: fc.oneof(
        fc.integer({ min: 0, max: 500 }),
        fc.integer({ min: 0, max: 6_000 }),
        // The window's edges, where off-by-one mistakes live.
        fc.constantFrom(WINDOW - 1, WINDOW, WINDOW + 1),
      ),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('pause' as const), ms: fc.nat(4_000) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('check' as const) }) },
);

let redis: Redis;
beforeAll(() => {
  redis = newRedis();
});
afterAll(() => {
  redis.disconnect();
});

function limiterFor(cfg: Config, names: ReturnType<typeof testNames>, clock: () => number) {
  return new Limiter({
    redis,
    names,
    windowMs: WINDOW,
    headroom: cfg.headroom,
    concurrency: cfg.concurrency,
    leaseMs: LEASE,
    outputAccounting: cfg.accounting,
    limits: cfg.limits['global'] ?? {},
    scopes: Object.fromEntries(NESTED.map((s) => [s, cfg.limits[s] ?? {}])),
    clock,
  });
}

async function checkSnapshot(lim: Limiter, model: Model, where: () => string): Promise<void> {
  const snap = await lim.snapshot();
  // The snapshot leaves out what left the window (only the write path drops it): as expired.
  model.expire();
  expect(snap.now, where()).toBe(model.now);
  for (const scope of ALL_SCOPES) {
    const s = snap.scopes.find((x) => x.scope === scope);
    const shape = { b: 'bucket', w: 'window' }[model.shape.get(scope) ?? ''] ?? 'unknown';
    expect(s?.shape ?? 'unknown', where()).toBe(shape);
    for (const d of DIMS) {
      const got = s?.dimensions[DIM_NAME[d]];
      const used = model.snapshotUsed(scope, d);
      const v = model.views.get(`${scope}|${d}`);
      const projected = model.projected(scope, d, v, used)?.room;
      const room = projected === undefined ? undefined : Math.floor(projected + 1e-9);
      expect(
        { scope, d, used: got?.used ?? 0, limit: got?.providerLimit, room: got?.providerRoom },
        where(),
      ).toEqual({ scope, d, used, limit: v?.lim, room });
    }
  }
  expect(snap.pausedUntil, where()).toBe(model.pausedUntil > model.now ? model.pausedUntil : null);
  const live = [...model.slots.values()].filter((end) => end > model.now).length;
  expect(snap.inFlight, where()).toBe(live);
}

/**
 * The open sums a reading takes as not counted (`scope|dim|open` in tot, kept as calls are
 * admitted, begin, end and adjust) equal what the model's calls not begun hold.
 */
async function checkOpenSums(names: QueueNames, model: Model, where: () => string) {
  const tot = await redis.hgetall(limiterKeys(names).tot);
  for (const scope of ALL_SCOPES) {
    for (const d of ['req', 'in', 'out'] as const) {
      let open = 0;
      // A tenant's scope keeps none: no reading describes it.
      for (const e of model.entries.values())
        if (e.flags !== 's' && e.scopes.includes(scope) && !scope.startsWith('tenant:'))
          open += amount(e.a, d);
      const got = Number(tot[`${scope}|${d}|open`] ?? 0);
      expect({ scope, d, open: got }, where()).toEqual({ scope, d, open });
    }
  }
}

/** Headers of a reading drawn at random (any limit, remaining and reset). */
function headersOf(r: ReadingArb, now: number) {
  const headers: Record<string, string> = {};
  const dims: Partial<Record<Dim, ReadingDim>> = {};
  for (const { dim, limit, remainingPct, resetIn, round } of r.dims) {
    const remaining = Math.round((limit * remainingPct) / 100 / round) * round;
    const full = Math.ceil(((limit - remaining) * WINDOW) / limit);
    const h = rateHeaders(
      HEADER[dim],
      limit,
      remaining,
      resetIn === 'full' ? full : (resetIn ?? undefined),
      now,
    );
    Object.assign(headers, h);
    const reset = h[`anthropic-ratelimit-${HEADER[dim]}-reset`];
    dims[dim] = { limit, remaining, reset: reset ? Date.parse(reset) : -1 };
  }
  return { headers, dims };
}

async function agreementScenario(cfg: Config, ops: readonly Op[]): Promise<void> {
  const names = testNames('limmodel');
  const t0 = 1_800_000_000_000 + 1_000 * Math.floor(Math.random() * 1_000);
  let t = t0;
  const model = new Model(cfg, t);
  const lim = limiterFor(cfg, names, () => t);
  const calls = new Map<string, { call: CallHandle; r: Reservation; a: Amounts }>();
  // The handle of a call describes the scope its readings are of: the one the test draws.
  const trace: string[] = [];
  const where = () => `after:\n${trace.join('\n')}`;
  try {
    for (const op of ops) {
      trace.push(`t0+${t - t0} ${JSON.stringify(op)}`);
      const ids = [...calls.keys()];
      const target = 'pick' in op ? calls.get(ids[op.pick % Math.max(ids.length, 1)]!) : undefined;
      switch (op.kind) {
        case 'acquire': {
          const a = { req: op.req, in: op.in, out: op.out };
          const scopes = ['global', ...op.scopes];
          const expected = model.acquire(a, scopes);
          let got: Decision | 'exceeds';
          try {
            got = await lim.tryAcquire(
              { requests: a.req, inputTokens: a.in, outputTokens: a.out },
              { scopes: op.scopes },
            );
          } catch (err) {
            if (!(err instanceof CostExceedsLimitError)) throw err;
            got = 'exceeds';
          }
          if (expected === 'admit') {
            expect(got, where()).toMatchObject({ ok: true });
            if (got !== 'exceeds' && got.ok) {
              model.admit(got.reservation.id, a, scopes);
              calls.set(got.reservation.id, {
                call: lim.call(got.reservation),
                r: got.reservation,
                a,
              });
            }
          } else expect(got, where()).toEqual(expected);
          break;
        }
        case 'begin': {
          // A handle begins once: a second response start of the same call is no news.
          if (!target || target.call.started) break;
          const reading = op.reading && headersOf(op.reading, t);
          target.call = lim.call(target.r, op.reading?.scope ?? 'global');
          await target.call.begin(reading?.headers ?? undefined, op.ageMs);
          model.begin(
            target.r.id,
            reading ? { scope: op.reading!.scope, dims: reading.dims } : null,
            op.ageMs,
          );
          break;
        }
        case 'beginTogether': {
          // Answers that arrive together: their stamps and readings go in one record run.
          const begun = new Set<CallHandle>();
          const started: Promise<void>[] = [];
          const told: (() => void)[] = [];
          for (const b of op.begins) {
            const c = calls.get(ids[b.pick % Math.max(ids.length, 1)]!);
            if (!c || c.call.started || begun.has(c.call)) continue;
            const reading = b.reading && headersOf(b.reading, t);
            c.call = lim.call(c.r, b.reading?.scope ?? 'global');
            begun.add(c.call);
            started.push(c.call.begin(reading?.headers ?? undefined, b.ageMs));
            model.begin(c.r.id, null, b.ageMs);
            if (reading) {
              const dims = { scope: b.reading!.scope, dims: reading.dims };
              told.push(() => model.read(c.r.id, dims, b.ageMs));
            }
          }
          await Promise.all(started);
          // The run stamps them all before it stores their readings.
          for (const tell of told) tell();
          break;
        }
        case 'settle': {
          if (!target) break;
          const use = {
            in: Math.floor((target.a.in * op.inPct) / 100),
            out: Math.floor((target.a.out * op.outPct) / 100),
          };
          const answer = await target.call.succeeded({
            inputTokens: use.in,
            outputTokens: use.out,
          });
          expect(answer, where()).toEqual(model.end(target.r.id, 'usage', use));
          calls.delete(target.r.id);
          break;
        }
        case 'keep':
        case 'release':
          if (!target) break;
          if (op.kind === 'keep') await target.call.failed({ charged: true });
          else await target.call.abandoned();
          model.end(target.r.id, op.kind === 'keep' || target.call.started ? 'keep' : 'release');
          calls.delete(target.r.id);
          break;
        case 'advance':
          t += op.ms;
          model.now = t;
          break;
        case 'pause': {
          const until = await lim.pauseFor(op.ms);
          model.pausedUntil = Math.max(model.pausedUntil, t + op.ms);
          expect(until, where()).toBe(model.pausedUntil);
          break;
        }
        case 'check':
          await checkSnapshot(lim, model, where);
          await checkOpenSums(names, model, where);
          break;
      }
    }
    await checkSnapshot(lim, model, where);
    await checkOpenSums(names, model, where);
  } finally {
    await deleteKeys(redis, names.prefix);
  }
}

/** One step of a safety run: llmq's call, then time passing; before it, a foreign client's. */
interface SafetyStep {
  in: number;
  out: number;
  outPct: number;
  ms: number;
  lateMs: number;
  /** Tokens the foreign client spends on the key before llmq's call (0: none). */
  foreign: number;
}

/** Token limits made multiples of {@link ROUNDING}. */
function roundLimits(l: DimensionLimits): DimensionLimits {
  const round = (n: number | undefined) =>
    n === undefined ? undefined : Math.max(1, Math.round(n / ROUNDING)) * ROUNDING;
  return {
    ...l,
    ...(l.inputTokens !== undefined ? { inputTokens: round(l.inputTokens) } : {}),
    ...(l.outputTokens !== undefined ? { outputTokens: round(l.outputTokens) } : {}),
    ...(l.tokens !== undefined ? { tokens: round(l.tokens) } : {}),
  };
}

/** The rounding of rounded readings: limits are multiples of it, as the API's are of 1,000. */
const ROUNDING = 50;

const HEADER_OF_CHARGE = {
  requests: 'requests',
  input_tokens: 'input-tokens',
  output_tokens: 'output-tokens',
  tokens: 'tokens',
} as const;

/**
 * The provider's rate-limit headers now: exact, or each token reading rounded to the nearest
 * {@link ROUNDING}, as the API rounds its readings to the nearest thousand.
 */
function providerHeaders(provider: RateLimiter, t: number, rounded: boolean) {
  const headers: Record<string, string> = {};
  const state = Object.entries(provider.state(t));
  const step = rounded ? ROUNDING : 1;
  for (const [dim, st] of state) {
    const round = dim === 'requests' ? 1 : step;
    const remaining = Math.round(st.remaining / round) * round;
    const name = HEADER_OF_CHARGE[dim as keyof typeof HEADER_OF_CHARGE];
    Object.assign(headers, rateHeaders(name, st.limit, remaining, st.resetAt - t, t));
  }
  return headers;
}

/**
 * Calls of random sizes against a provider of `shape` with the configured global limits, and a
 * foreign client spending on the same key. llmq cannot see a foreign spend before a reading
 * taken after it: a call it admits blind (no such reading yet) may draw a 429, which brings
 * the reading. Every call admitted with the provider's word on every foreign spend must fit.
 */
async function safetyScenario(
  cfg: Config & { rounded: boolean },
  shape: 'sliding' | 'bucket',
  steps: readonly SafetyStep[],
): Promise<void> {
  const names = testNames('limsafe');
  let t = 1_800_000_000_000;
  const limits = cfg.limits['global'] ?? {};
  const provider = createRateLimiter(
    shape,
    {
      requests: limits.requests,
      input_tokens: limits.inputTokens,
      output_tokens: limits.outputTokens,
      tokens: limits.tokens,
    },
    WINDOW,
  );
  const lim = limiterFor({ ...cfg, limits: { global: limits } }, names, () => t);
  interface Sent {
    sentAt: number;
    /** Its headers reach llmq then (a slow process, a late packet): calls sent after go first. */
    beginAt: number;
    headers: Record<string, string> | undefined;
    /** The provider's events before its reading (see `event`). */
    readingOf: number;
    endsAt: number;
    call: CallHandle;
    /** The provider's admission; undefined: it refused the call (a 429). */
    ticket: LimitTicket | undefined;
    out: number;
  }
  const inFlight: Sent[] = [];
  const trace: string[] = [];
  // The provider's events in order: the last foreign spend's, and the newest reading llmq holds.
  let event = 0;
  let foreignAt = -1;
  let readAt = -1;
  // An answer: a 429's reading, its budget back; or the response's start and its reading.
  const answer = async (f: Sent) => {
    if (!f.headers) return;
    if (!f.ticket) {
      await f.call.failed({ charged: false }, f.headers, t - f.sentAt);
      inFlight.splice(inFlight.indexOf(f), 1);
    } else await f.call.begin(f.headers, t - f.sentAt);
    readAt = Math.max(readAt, f.readingOf);
    f.headers = undefined;
  };
  try {
    for (const s of steps) {
      trace.push(`t+${t - 1_800_000_000_000} ${JSON.stringify(s)}`);
      if (s.foreign > 0) {
        const half = Math.ceil(s.foreign / 2);
        const charge = { requests: 1, input_tokens: half, output_tokens: half, tokens: 2 * half };
        if (provider.consume(charge, t).admitted) foreignAt = ++event;
      }
      const c = { requests: 1, inputTokens: s.in, outputTokens: s.out };
      const d = await lim.tryAcquire(c).catch(() => undefined);
      if (d?.ok) {
        const charge: ProviderCharge = {
          requests: 1,
          input_tokens: s.in,
          output_tokens: s.out,
          tokens: s.in + s.out,
        };
        const informed = readAt >= foreignAt;
        const a = provider.consume(charge, t);
        if (!a.admitted)
          expect(informed, `the provider refused a call llmq admitted:\n${trace.join('\n')}`).toBe(
            false,
          );
        // Its answer (a 429 too) comes after the provider's decision: a millisecond at least.
        inFlight.push({
          sentAt: t,
          beginAt: t + 1 + s.lateMs,
          headers: providerHeaders(provider, t, cfg.rounded),
          readingOf: ++event,
          endsAt: t + Math.max(200, 1 + s.lateMs),
          call: lim.call(d.reservation),
          ticket: a.admitted ? a.ticket : undefined,
          out: Math.floor((s.out * s.outPct) / 100),
        });
      }
      t += s.ms;
      const due = inFlight.filter((x) => x.headers && x.beginAt <= t);
      for (const f of due.sort((x, y) => x.beginAt - y.beginAt)) await answer(f);
      for (const f of inFlight.filter(
        (x): x is Sent & { ticket: LimitTicket } => x.ticket !== undefined && x.endsAt <= t,
      )) {
        if (cfg.accounting !== 'reserve')
          provider.refund(
            f.ticket,
            {
              output_tokens: f.ticket.charge.output_tokens - f.out,
              tokens: f.ticket.charge.output_tokens - f.out,
            },
            t,
          );
        await f.call.succeeded({ inputTokens: f.ticket.charge.input_tokens, outputTokens: f.out });
        inFlight.splice(inFlight.indexOf(f), 1);
      }
    }
  } finally {
    await deleteKeys(redis, names.prefix);
  }
}

// LIM_RUNS: runs per accounting mode; LIM_SEED: replay the seed a failure printed.
const runs = Number(process.env['LIM_RUNS'] ?? 150);
// LIM_PATH: with LIM_SEED, the path it printed; LIM_NO_SHRINK: report the first failure as is.
const seed = {
  ...(process.env['LIM_SEED']
    ? { seed: Number(process.env['LIM_SEED']), path: process.env['LIM_PATH'] }
    : {}),
  ...(process.env['LIM_NO_SHRINK'] ? { endOnFailure: true } : {}),
};
/**
 * The safety half draws from a fixed seed unless LIM_SEED or LIM_RANDOM=1 is set, so CI replays
 * the same runs (LIM_RANDOM=1 LIM_RUNS=16000 draws 8,000 a test for a deeper look).
 */
const safetySeed =
  process.env['LIM_SEED'] || process.env['LIM_RANDOM'] ? seed : { ...seed, seed: 50 };
/**
 * A run that found the window's double-freed room (a call answered late, dropped by the provider
 * before a reading that counted it; docs/limiter.md, `drop`): replayed on the sliding window with
 * exact readings.
 */
const lateAnswerRun = { seed: -451615902, path: '153', numRuns: 1, endOnFailure: true };

/** The examples' limits: 4,000 tokens a window on the key, nothing else. */
const exampleConfig = (accounting: OutputAccounting): Config => ({
  accounting,
  headroom: 0,
  concurrency: 0,
  limits: { global: { tokens: 4_000 }, 'tenant:a': {}, 'team:x': {} },
});

/**
 * A run random ops rarely draw: a call answered late is still in our window when a reading taken
 * a window after its admission counts it, then leaves while that reading stands (its `drop`).
 */
function lateAnswerExample(accounting: OutputAccounting): { cfg: Config; ops: Op[] } {
  const call = (tokens: number): Op => ({
    kind: 'acquire',
    req: 1,
    in: tokens,
    out: tokens,
    scopes: [],
  });
  // An exact reading (1,989 of 3,977: no rounding step divides both).
  const tok = { dim: 'tok' as const, limit: 3_977, remainingPct: 50, resetIn: WINDOW, round: 1 };
  return {
    cfg: exampleConfig(accounting),
    ops: [
      call(200),
      { kind: 'advance', ms: 6_000 },
      // Sent 6 s before its answer began.
      { kind: 'begin', pick: 0, reading: null, ageMs: 6_000 },
      { kind: 'advance', ms: WINDOW - 5_999 },
      call(100),
      { kind: 'begin', pick: 1, reading: { scope: 'global', dims: [tok] }, ageMs: 0 },
      { kind: 'advance', ms: 6_000 },
      call(1_100),
      { kind: 'check' },
    ],
  };
}

/** An exact tokens reading of the global scope on a window (its reset a window on). */
const windowTokens = (remainingPct: number): ReadingArb => ({
  scope: 'global',
  dims: [{ dim: 'tok', limit: 3_977, remainingPct, resetIn: WINDOW, round: 1 }],
});

/**
 * Answers that arrive together, the newer first: its reading marks its call read, so the older
 * reading, which leaves less room and stands, takes that call as counted, not late.
 */
function togetherExample(accounting: OutputAccounting): { cfg: Config; ops: Op[] } {
  const call: Op = { kind: 'acquire', req: 1, in: 300, out: 300, scopes: [] };
  return {
    cfg: exampleConfig(accounting),
    ops: [
      call,
      { kind: 'advance', ms: 100 },
      call,
      { kind: 'advance', ms: 300 },
      {
        kind: 'beginTogether',
        begins: [
          { pick: 1, reading: windowTokens(80), ageMs: 0 },
          { pick: 0, reading: windowTokens(50), ageMs: 300 },
        ],
      },
      { kind: 'check' },
    ],
  };
}

/**
 * Another client's spend rises between two readings of a window (about 390 tokens): the calls
 * that fit beside it go at once, the last of the room by one probe at a time; the next waits for
 * the probe's answer (or its call given back), then goes.
 */
function lastRoomExample(accounting: OutputAccounting): { cfg: Config; ops: Op[] } {
  const call = (tokens: number): Op => ({
    kind: 'acquire',
    req: 1,
    in: tokens / 2,
    out: tokens / 2,
    scopes: [],
  });
  return {
    cfg: exampleConfig(accounting),
    ops: [
      call(600),
      { kind: 'advance', ms: 100 },
      { kind: 'begin', pick: 0, reading: windowTokens(85), ageMs: 100 },
      call(600),
      { kind: 'advance', ms: 100 },
      { kind: 'begin', pick: 1, reading: windowTokens(60), ageMs: 100 },
      call(600),
      call(600),
      call(600),
      call(200),
      call(200),
      { kind: 'begin', pick: 5, reading: null, ageMs: 0 },
      call(200),
      call(100),
      // The probe's call given back: the next goes.
      { kind: 'release', pick: 6 },
      call(100),
      { kind: 'check' },
    ],
  };
}

describe('the limiter against a reference model', () => {
  for (const accounting of ['reserve', 'actual', 'produced'] as const) {
    it(`agrees with the model on every decision and snapshot (${accounting} output)`, async () => {
      const scenario = configArb(accounting).chain((cfg) =>
        fc.record({ cfg: fc.constant(cfg), ops: fc.array(opArb, { minLength: 1, maxLength: 60 }) }),
      );
      await fc.assert(
        fc.asyncProperty(scenario, ({ cfg, ops }) => agreementScenario(cfg, ops)),
        {
          numRuns: runs,
          ...seed,
          examples: [
            [lateAnswerExample(accounting)],
            [togetherExample(accounting)],
            [lastRoomExample(accounting)],
          ],
        },
      );
    }, 300_000);
  }

  for (const shape of ['sliding', 'bucket'] as const) {
    for (const rounded of [false, true]) {
      const readings = rounded ? 'rounded' : 'exact';
      it(`at the default headroom, never admits a call a ${shape} provider refuses once it read every foreign spend (${readings} readings)`, async () => {
        const step = fc.record({
          in: fc.integer({ min: 0, max: 600 }),
          out: fc.integer({ min: 1, max: 600 }),
          outPct: fc.integer({ min: 0, max: 100 }),
          ms: fc.oneof(fc.integer({ min: 0, max: 50 }), fc.integer({ min: 0, max: 2_000 })),
          // Its headers come late: calls sent after it may begin first.
          lateMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 400 })),
          // Another client on the key: about a third of the steps, calls as large as llmq's.
          foreign: fc.oneof(
            { weight: 2, arbitrary: fc.constant(0) },
            { weight: 1, arbitrary: fc.integer({ min: 1, max: 1_200 }) },
          ),
        });
        const scenario = fc.record({
          cfg: fc.record({
            accounting: fc.constantFrom<OutputAccounting>('reserve', 'actual', 'produced'),
            headroom: fc.constant(0),
            concurrency: fc.constantFrom(0, 4),
            limits: fc.record({ global: limitsArb(1_000, 4_000).map(roundLimits) }),
            rounded: fc.constant(rounded),
          }),
          steps: fc.array(step, { minLength: 5, maxLength: 80 }),
        });
        const property = fc.asyncProperty(scenario, ({ cfg, steps }) =>
          safetyScenario(cfg, shape, steps),
        );
        await fc.assert(property, { numRuns: Math.ceil(runs / 2), ...safetySeed });
        if (shape === 'sliding' && !rounded) await fc.assert(property, lateAnswerRun);
      }, 300_000);
    }
  }
});
