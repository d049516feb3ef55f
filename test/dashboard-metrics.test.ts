import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveDashboardOptions } from '../dashboard/options.ts';
import { type DashboardHandle, startDashboard } from '../dashboard/server.ts';
import { Producer } from '../producer/producer.ts';
import { llmqKey } from '../shared/keys.ts';
import { Limiter } from '../shared/limiter/limiter.ts';
import { MetricsWriter, metricsKey } from '../shared/metrics.ts';
import { registerQueue } from '../shared/queues.ts';
import { deleteKeys, newRedis, settle, testNames } from './helpers.ts';

/** What a scrape held: samples by `name{label="v",…}` (labels sorted) and the family types. */
interface Exposition {
  readonly samples: Map<string, number>;
  readonly types: Map<string, string>;
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: (-?\d+))?$/;
const LABEL = /^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\[\\"n])*)"$/;
const VALUE = /^(?:[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?Inf|NaN)$/;

function splitLabels(text: string): string[] {
  const out: string[] = [];
  let current = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if (ch === '\\' && quoted) {
      current += ch + (text[i + 1] ?? '');
      i++;
      continue;
    }
    if (ch === '"') quoted = !quoted;
    if (ch === ',' && !quoted) {
      out.push(current);
      current = '';
      continue;
    }
    current += ch;
  }
  if (current !== '') out.push(current);
  return out;
}

/**
 * A strict reading of the Prometheus text format (0.0.4): every line a comment, blank, or
 * `name{labels} value`; TYPE lines name a valid type once, before the family's samples; every
 * sample belongs to a declared family; histogram buckets are cumulative and end at +Inf = count.
 */
function parseExposition(text: string): Exposition {
  const samples = new Map<string, number>();
  const types = new Map<string, string>();
  const seen = new Set<string>();
  const familyOf = (name: string): string | undefined => {
    if (types.has(name)) return name;
    for (const suffix of ['_bucket', '_sum', '_count']) {
      const base = name.endsWith(suffix) ? name.slice(0, -suffix.length) : undefined;
      if (base && (types.get(base) === 'histogram' || types.get(base) === 'summary')) return base;
    }
    return undefined;
  };
  for (const [i, line] of text.split('\n').entries()) {
    const where = `line ${i + 1}: ${JSON.stringify(line)}`;
    if (line === '') continue;
    if (line.startsWith('#')) {
      const parts = line.split(' ');
      if (parts[1] === 'TYPE') {
        const [, , name, type, ...rest] = parts;
        expect(rest, where).toEqual([]);
        expect(name, where).toMatch(NAME);
        expect(['counter', 'gauge', 'histogram', 'summary', 'untyped'], where).toContain(type);
        expect(types.has(name!), `${where}: TYPE given twice`).toBe(false);
        expect(seen.has(name!), `${where}: TYPE after samples`).toBe(false);
        types.set(name!, type!);
      } else if (parts[1] === 'HELP') {
        expect(parts[2], where).toMatch(NAME);
      }
      continue;
    }
    const m = SAMPLE.exec(line);
    expect(m, where).not.toBeNull();
    const [, name, labelText, value] = m!;
    expect(value, where).toMatch(VALUE);
    const labels = labelText ? splitLabels(labelText) : [];
    for (const l of labels) expect(l, where).toMatch(LABEL);
    const family = familyOf(name!);
    expect(family, `${where}: no TYPE for this sample`).toBeDefined();
    seen.add(family!);
    if (name!.endsWith('_bucket'))
      expect(
        labels.some((l) => l.startsWith('le=')),
        where,
      ).toBe(true);
    const key = `${name}{${[...labels].sort().join(',')}}`;
    expect(samples.has(key), `${where}: duplicate sample`).toBe(false);
    samples.set(key, Number(value === '+Inf' ? Infinity : value));
  }
  for (const [family, type] of types) {
    if (type !== 'histogram') continue;
    const series = new Map<string, { le: number; v: number }[]>();
    for (const [key, v] of samples) {
      if (!key.startsWith(`${family}_bucket{`)) continue;
      const labels = key.slice(key.indexOf('{') + 1, -1).split(',');
      const le = labels.find((l) => l.startsWith('le='))!;
      const rest = labels.filter((l) => l !== le).join(',');
      const bound = le.slice(4, -1);
      series.set(rest, [
        ...(series.get(rest) ?? []),
        { le: bound === '+Inf' ? Infinity : Number(bound), v },
      ]);
    }
    for (const [rest, buckets] of series) {
      buckets.sort((a, b) => a.le - b.le);
      for (let i = 1; i < buckets.length; i++)
        expect(buckets[i]!.v).toBeGreaterThanOrEqual(buckets[i - 1]!.v);
      expect(buckets.at(-1)!.le, `${family}{${rest}} has a +Inf bucket`).toBe(Infinity);
      expect(samples.get(`${family}_count{${rest}}`)).toBe(buckets.at(-1)!.v);
      expect(samples.has(`${family}_sum{${rest}}`)).toBe(true);
    }
  }
  return { samples, types };
}

describe('the exposition checker', () => {
  it('refuses what Prometheus would refuse', () => {
    expect(() => parseExposition('# TYPE a gauge\na{b} 1\n')).toThrow();
    expect(() => parseExposition('a 1\n')).toThrow();
    expect(() => parseExposition('# TYPE a gauge\na one\n')).toThrow();
    expect(() =>
      parseExposition(
        '# TYPE a histogram\na_bucket{le="1"} 2\na_bucket{le="+Inf"} 1\na_count 1\na_sum 3\n',
      ),
    ).toThrow();
    expect(parseExposition('# TYPE a gauge\na{b="x \\"y\\""} 1.5e3\n').samples.size).toBe(1);
  });
});

describe('/metrics', () => {
  let redis: Redis;
  let names: ReturnType<typeof testNames>;
  let producer: Producer;
  let limiter: Limiter;
  let dashboard: DashboardHandle;
  const TOKEN = 'prometheus-scraper-token';

  beforeAll(async () => {
    redis = newRedis();
    names = testNames('dmet');
    producer = new Producer({ redis, names });
    await producer.enqueue({
      model: 'claude-sonnet-4-5',
      max_tokens: 100,
      messages: [{ role: 'user', content: 'hi' }],
    });
    limiter = new Limiter({
      redis,
      names,
      windowMs: 60_000,
      limits: { tokens: 10_000, requests: 50 },
      concurrency: 4,
    });
    await limiter.publishConfig();
    dashboard = await startDashboard({
      redis,
      prefix: names.prefix,
      port: 0,
      auth: { token: TOKEN },
      maxDepth: 500,
    });
  });

  afterAll(async () => {
    await dashboard?.close();
    await producer?.close();
    if (redis) {
      await deleteKeys(redis, names.prefix);
      redis.disconnect();
    }
  });

  const scrape = async (): Promise<Exposition> => {
    const res = await fetch(`${dashboard.baseUrl}/metrics`, {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    return parseExposition(await res.text());
  };
  const q = (labels: string) => `queue="${names.queue}"${labels ? `,${labels}` : ''}`;
  const sample = (e: Exposition, name: string, labels = '') => {
    const sorted = q(labels).split(',').sort().join(',');
    return e.samples.get(`${name}{${sorted}}`);
  };

  it('needs credentials, and a bearer token is enough for Prometheus', async () => {
    expect((await fetch(`${dashboard.baseUrl}/metrics`)).status).toBe(401);
    const wrong = await fetch(`${dashboard.baseUrl}/metrics`, {
      headers: { authorization: 'Bearer nope' },
    });
    expect(wrong.status).toBe(401);
    expect(wrong.headers.get('www-authenticate')).toMatch(/^Bearer/);
  });

  it('parses as Prometheus text, with a latency histogram family and every gauge of the queue', async () => {
    const e = await scrape();
    expect(e.types.get('llmq_provider_latency_seconds')).toBe('histogram');
    expect(e.types.get('llmq_jobs')).toBe('gauge');
    expect(e.types.get('llmq_rate_limited_total')).toBe('counter');
    expect(sample(e, 'llmq_jobs', 'state="prioritized"')).toBe(1);
    expect(sample(e, 'llmq_queue_depth')).toBe(1);
    expect(sample(e, 'llmq_queue_depth_bound')).toBe(500);
    expect(sample(e, 'llmq_window_limit', 'scope="global",dimension="tokens"')).toBe(10_000);
    expect(sample(e, 'llmq_slots_cap')).toBe(4);
    expect(sample(e, 'llmq_breaker_state', 'state="closed"')).toBe(1);
    expect(sample(e, 'llmq_dead_letters')).toBe(0);
  });

  it('moves its counters with work done between two scrapes', async () => {
    const before = await scrape();

    const ok = await limiter.tryAcquire({ requests: 1, inputTokens: 300, outputTokens: 700 });
    if (!ok.ok) throw new Error(`refused: ${JSON.stringify(ok)}`);
    await settle(limiter, ok.reservation, { inputTokens: 240, outputTokens: 500 });
    const tooBig = await limiter.tryAcquire({
      requests: 1,
      inputTokens: 3_000,
      outputTokens: 6_100,
    });
    expect(tooBig).toMatchObject({ ok: false, reason: 'budget' });
    const metrics = new MetricsWriter(redis, names);
    await Promise.all([
      metrics.add({
        provider_calls: 3,
        provider_ok: 1,
        provider_429_retry_after: 1,
        provider_429_final: 1,
        tokens_in: 240,
        tokens_out: 500,
        completed: 1,
      }),
      metrics.latency(1_200),
    ]);
    await producer.enqueue({
      model: 'claude-sonnet-4-5',
      max_tokens: 100,
      messages: [{ role: 'user', content: 'again' }],
    });
    await redis.hset(llmqKey(names, 'breaker'), {
      state: 'open',
      failures: '5',
      open_until: String(Date.now() + 30_000),
    });

    const after = await scrape();
    const grew = (name: string, labels = '') =>
      (sample(after, name, labels) ?? 0) - (sample(before, name, labels) ?? 0);
    expect(grew('llmq_provider_calls_total')).toBe(3);
    expect(grew('llmq_rate_limited_total', 'source="provider",kind="retry_after"')).toBe(1);
    expect(grew('llmq_rate_limited_total', 'source="provider",kind="final"')).toBe(1);
    expect(grew('llmq_rate_limited_total', 'source="llmq",kind="budget"')).toBe(1);
    expect(grew('llmq_tokens_reserved_total', 'direction="input"')).toBe(300);
    expect(grew('llmq_tokens_used_total', 'direction="input"')).toBe(240);
    expect(grew('llmq_limiter_admitted_total')).toBe(1);
    expect(grew('llmq_provider_tokens_total', 'direction="output"')).toBe(500);
    expect(grew('llmq_window_used', 'scope="global",dimension="tokens"')).toBe(940);
    expect(grew('llmq_provider_latency_seconds_count')).toBe(1);
    expect(grew('llmq_provider_latency_seconds_bucket', 'le="2.5"')).toBe(1);
    expect(grew('llmq_provider_latency_seconds_bucket', 'le="1"')).toBe(0);
    expect(grew('llmq_provider_latency_seconds_sum')).toBeCloseTo(1.2);
    expect(grew('llmq_jobs', 'state="prioritized"')).toBe(1);
    expect(sample(after, 'llmq_breaker_state', 'state="open"')).toBe(1);
    expect(sample(after, 'llmq_breaker_failures')).toBe(5);
    expect(sample(after, 'llmq_estimate_accuracy_ratio', 'direction="input"')).toBeCloseTo(0.8);
  });

  it('histograms of wait, call and tokens by model and tenant, with a bounded tenant label', async () => {
    const metrics = new MetricsWriter(redis, names);
    const seen = [
      { model: 'claude-a', tenant: 'acme', waitMs: 2_000, callMs: 400 },
      { model: 'claude-a', tenant: 'acme', waitMs: 20, callMs: 3_000 },
      { model: 'claude-b', tenant: undefined, waitMs: 70_000, callMs: 200 },
    ];
    await Promise.all(
      seen.map((o) => metrics.observe({ ...o, inputTokens: 500, outputTokens: 50, ok: true })),
    );
    // Past 50 distinct tenants, the rest share one label.
    await Promise.all(
      Array.from({ length: 55 }, (_, i) =>
        metrics.observe({ model: 'claude-a', tenant: `t${i}`, waitMs: 1, callMs: 1, ok: true }),
      ),
    );
    const e = await scrape();
    expect(e.types.get('llmq_job_wait_seconds')).toBe('histogram');
    expect(e.types.get('gen_ai_client_operation_duration_seconds')).toBe('histogram');
    expect(e.types.get('gen_ai_client_token_usage')).toBe('histogram');
    const acme = 'gen_ai_request_model="claude-a",tenant="acme"';
    expect(sample(e, 'llmq_job_wait_seconds_count', acme)).toBe(2);
    expect(sample(e, 'llmq_job_wait_seconds_bucket', `${acme},le="0.1"`)).toBe(1);
    expect(sample(e, 'llmq_job_wait_seconds_sum', acme)).toBeCloseTo(2.02);
    expect(sample(e, 'gen_ai_client_operation_duration_seconds_bucket', `${acme},le="0.5"`)).toBe(
      1,
    );
    expect(sample(e, 'gen_ai_client_token_usage_sum', `${acme},gen_ai_token_type="output"`)).toBe(
      100,
    );
    expect(
      sample(e, 'llmq_job_wait_seconds_count', 'gen_ai_request_model="claude-b",tenant="-"'),
    ).toBe(1);
    const tenants = new Set(
      [...e.samples.keys()]
        .filter((k) => k.startsWith('llmq_job_wait_seconds_count{'))
        .map((k) => /tenant="([^"]*)"/.exec(k)![1]),
    );
    expect(tenants.has('other')).toBe(true);
    expect(tenants.size).toBeLessThanOrEqual(52); // 50, the tenant-less '-', and 'other'
  });

  it("adds the cumulative buckets an older worker wrote to this one's", async () => {
    // An older worker added a value to every bucket at or above it: two calls of 300 ms.
    const old = 'h|call|claude-old|upgraded|';
    const bounds = [500, 1_000, 2_500, 5_000, 10_000, 30_000, 120_000];
    const fields = bounds.flatMap((b) => [`${old}le_${b}`, 2]);
    await redis.hset(metricsKey(names), ...fields, `${old}sum`, 600, `${old}count`, 2);
    const metrics = new MetricsWriter(redis, names);
    await metrics.observe({
      model: 'claude-old',
      tenant: 'upgraded',
      waitMs: 5,
      callMs: 150,
      ok: true,
    });
    await metrics.observe({
      model: 'claude-old',
      tenant: 'upgraded',
      waitMs: 5,
      callMs: 800,
      ok: true,
    });
    const e = await scrape();
    const at = (le: string) =>
      sample(
        e,
        'gen_ai_client_operation_duration_seconds_bucket',
        `gen_ai_request_model="claude-old",le="${le}",tenant="upgraded"`,
      );
    expect([at('0.1'), at('0.25'), at('0.5'), at('1'), at('120'), at('+Inf')]).toEqual([
      0, 1, 3, 4, 4, 4,
    ]);
  });
});

describe('/metrics with 2,000 tenants', () => {
  let redis: Redis;
  let names: ReturnType<typeof testNames>;
  const dashboards: DashboardHandle[] = [];
  const TENANTS = 2_000;
  const BUSY = ['busy-a', 'busy-b', 'busy-c', 'busy-d', 'busy-e'];
  const tenantOf = (i: number) => `t${String(i).padStart(4, '0')}`;

  beforeAll(async () => {
    redis = newRedis();
    names = testNames('dten');
    await registerQueue(redis, names);
    const limiter = new Limiter({
      redis,
      names,
      windowMs: 60_000,
      limits: { requests: 1_000_000, tokens: 1_000_000_000 },
    });
    await limiter.publishConfig();
    const cost = { requests: 1, inputTokens: 10, outputTokens: 10 };
    // Every tenant one call in the window; the busy ones three more each.
    const calls = [
      ...Array.from({ length: TENANTS }, (_, i) => tenantOf(i)),
      ...BUSY.flatMap((t) => [t, t, t, t]),
    ];
    for (let i = 0; i < calls.length; i += 250) {
      await Promise.all(
        calls.slice(i, i + 250).map(async (t) => {
          const d = await limiter.tryAcquire(cost, { scopes: [`tenant:${t}`] });
          expect(d.ok).toBe(true);
        }),
      );
    }
    // 40 worker processes, each seeing 50 tenants (its own label cap): every tenant is named
    // in Redis's histograms.
    for (let w = 0; w < TENANTS / 50; w++) {
      const writer = new MetricsWriter(redis, names);
      await Promise.all(
        Array.from({ length: 50 }, (_, j) =>
          writer.observe({
            model: 'claude-a',
            tenant: tenantOf(w * 50 + j),
            waitMs: 5,
            callMs: 300,
            ok: true,
          }),
        ),
      );
    }
    const busy = new MetricsWriter(redis, names);
    await Promise.all(
      BUSY.map((t) =>
        busy.observe({ model: 'claude-a', tenant: t, waitMs: 5, callMs: 300, ok: true }),
      ),
    );
  });

  afterAll(async () => {
    for (const d of dashboards) await d.close();
    await deleteKeys(redis, names.prefix);
    redis.disconnect();
  });

  const scrapeWith = async (metricsTenants?: number) => {
    const dashboard = await startDashboard({
      redis,
      prefix: names.prefix,
      port: 0,
      auth: { token: 't' },
      ...(metricsTenants !== undefined ? { metricsTenants } : {}),
    });
    dashboards.push(dashboard);
    const res = await fetch(`${dashboard.baseUrl}/metrics`, {
      headers: { authorization: 'Bearer t' },
    });
    expect(res.status).toBe(200);
    const text = await res.text();
    return { bytes: Buffer.byteLength(text), e: parseExposition(text) };
  };
  /** Every value of `name` by its tenant (scope `tenant:x` or label `tenant="x"`). */
  const byTenant = (e: Exposition, name: string, also = '') => {
    const out = new Map<string, number>();
    for (const [key, v] of e.samples) {
      if (!key.startsWith(`${name}{`) || !key.includes(also)) continue;
      const t = /(?:scope="tenant:|tenant=")([^"]*)"/.exec(key)?.[1];
      if (t !== undefined) out.set(t, v);
    }
    return out;
  };
  const total = (m: Map<string, number>) => [...m.values()].reduce((a, b) => a + b, 0);

  it('names the 10 busiest tenants, sums the rest as other, and stays under 100 KB', async () => {
    const { bytes, e } = await scrapeWith();
    expect(bytes).toBeLessThan(100 * 1024);
    const used = byTenant(e, 'llmq_window_used', 'dimension="requests"');
    expect(used.size).toBe(11);
    for (const t of BUSY) expect(used.get(t)).toBe(4);
    // Every call of the window is counted once: named or in other.
    expect(used.get('other')).toBe(TENANTS - 5);
    expect(total(used)).toBe(TENANTS + BUSY.length * 4);
    const calls = byTenant(e, 'gen_ai_client_operation_duration_seconds_count');
    expect([...calls.keys()].sort()).toEqual([...used.keys()].sort());
    expect(total(calls)).toBe(TENANTS + BUSY.length);
  });

  it('names as many tenants as configured', async () => {
    const { e } = await scrapeWith(3);
    const used = byTenant(e, 'llmq_window_used', 'dimension="requests"');
    expect([...used.keys()].sort()).toEqual(['busy-a', 'busy-b', 'busy-c', 'other']);
    expect(used.get('other')).toBe(TENANTS + 2 * 4);
    expect(resolveDashboardOptions({ env: { LLMQ_METRICS_TENANTS: '3' } }).metricsTenants).toBe(3);
    expect(() => resolveDashboardOptions({ env: { LLMQ_METRICS_TENANTS: 'many' } })).toThrow(
      'LLMQ_METRICS_TENANTS must be a whole number from 0 (every tenant as "other") to 1000, got "many"',
    );
  });
});
