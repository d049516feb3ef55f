/**
 * The pages a team watches, in a real browser, during a real run: workers against the mock over
 * HTTP, two tenants and two models, the provider's 429s, one dead letter. Each figure a page
 * draws is compared with what BullMQ, the workers' counters and the money ledger hold in Redis.
 * Screenshots of every page go to .screenshots/dashboard/ (git-ignored).
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Job } from 'bullmq';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DashboardHandle, startDashboard } from '../dashboard/server.ts';
import { BudgetLedger } from '../shared/budgets.ts';
import type { AttemptRecord, JobData, JobResult } from '../shared/job.ts';
import { modelOf } from '../shared/job-kept.ts';
import { limiterKeys } from '../shared/limiter/limiter-keys.ts';
import { readMetrics } from '../shared/metrics.ts';
import { listPriceUsd, priceTable } from '../shared/prices.ts';
import { launchChromium, skipWithoutChromium } from './fixtures/chromium.ts';
import { allCompleted, openPool, type Pool, ROOT, request } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const skip = skipWithoutChromium('dashboard-pages');
const SHOTS = join(ROOT, '.screenshots', 'dashboard');
const TOKEN = 'pages-test-token-91';
const SONNET = 'claude-sonnet-4-6';
const HAIKU = 'claude-haiku-4-5';
const BUDGETS = { global: { day: 50 }, 'tenant:acme': { day: 5 } };
const SETTINGS = { budgets: BUDGETS, policy: 'wait', prices: priceTable() } as const;

type Done = Job<JobData, JobResult>;

/** Each try's wait, as the worker measures it: from enqueue, or the end of the try before. */
function triesWaits(data: JobData, tries: readonly AttemptRecord[], lastStart?: number): number[] {
  const starts = [...tries.map((a) => a.at), ...(lastStart === undefined ? [] : [lastStart])];
  return starts.map((at, k) => {
    const before = tries[k - 1];
    return at - (before ? before.at + (before.latencyMs ?? 0) : data.enqueuedAt);
  });
}
/** A completed job's waits: its failed tries', then its call's (begun one latency before it ended). */
const waitsOf = (j: Done) =>
  triesWaits(j.data, j.data.history ?? [], j.returnvalue.completedAt - j.returnvalue.latencyMs);
const sum = (xs: readonly (number | null)[]) => xs.reduce<number>((a, b) => a + (b ?? 0), 0);
/** The nearest-rank quantile of what was measured. */
const quantile = (xs: readonly number[], p: number) =>
  [...xs].sort((a, b) => a - b)[Math.max(0, Math.ceil(p * xs.length) - 1)]!;

describe.skipIf(skip)('the dashboard a team watches', () => {
  let pool: Pool;
  let dashboard: DashboardHandle;
  let browser: Browser;
  let bad: string;

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    // The provider allows 6 requests a second; the workers are told 8 and do not read its
    // headers: it answers some calls with a 429 and retry-after.
    pool = await openPool('pages', {
      latencyMs: 40,
      maxOutputTokens: 1_000,
      windowMs: 1_000,
      limits: { requests: 6 },
    });
    await pool.worker({
      concurrency: 8,
      feedback: false,
      budgets: SETTINGS,
      limiter: {
        limits: { requests: 8 },
        scopes: { 'tenant:acme': { requests: 40 } },
        windowMs: 1_000,
        headroom: 0,
      },
    });
    const ids: string[] = [];
    for (let i = 0; i < 24; i++) {
      const model = i % 4 < 2 ? SONNET : HAIKU;
      const tenant = i % 2 ? 'acme' : 'globex';
      ids.push(await pool.producer.enqueue(request(`job ${i}`, 120, model), { tenant }));
    }
    // Above the model's 1,000 output tokens: a 400, dead-lettered.
    bad = await pool.producer.enqueue(request('too long', 2_000, HAIKU), { tenant: 'acme' });
    await allCompleted(pool, ids, 60_000);
    await until(async () => (await pool.dlq.getJobCountByTypes('wait')) === 1, 20_000);
    await until(async () => (await readMetrics(pool.redis, pool.names))['completed'] === 24);
    dashboard = await startDashboard({
      redis: pool.redis,
      prefix: pool.names.prefix,
      port: 0,
      auth: { token: TOKEN },
      budgets: BUDGETS,
    });
    browser = await launchChromium();
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await dashboard?.close();
    await pool?.cleanup();
  });

  /** What Redis holds of the run: the jobs, the workers' counters. */
  async function truth() {
    const done = (await pool.queue.getJobs(['completed'], 0, -1)).filter(Boolean) as Done[];
    const metrics = await readMetrics(pool.redis, pool.names);
    const spend = (jobs: Done[]) =>
      sum(jobs.map((j) => listPriceUsd(modelOf(j.data)!, j.returnvalue.message.usage)));
    const of = (f: (j: Done) => boolean) => done.filter(f);
    // What the budgets count today (a call that may have been charged keeps its worst case).
    const ledger = new BudgetLedger(pool.redis, pool.names, SETTINGS);
    const budgeted = (name: string) => ledger.spend().then((s) => (s.day[name] ?? 0) / 1e6);
    return { done, metrics, spend, of, budgeted };
  }

  async function open(path: string): Promise<Page> {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await page.goto(`${dashboard.baseUrl}/?token=${TOKEN}`, { waitUntil: 'domcontentloaded' });
    await page.goto(dashboard.baseUrl + path, { waitUntil: 'domcontentloaded' });
    return page;
  }
  const value = async (page: Page, id: string) =>
    Number(await page.getByTestId(id).getAttribute('data-value'));
  const seriesOf = async (page: Page, id: string) =>
    JSON.parse((await page.getByTestId(id).getAttribute('data-series')) ?? '{}') as Record<
      string,
      (number | null)[]
    >;
  const shot = (page: Page, name: string) =>
    page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });

  it('the overview draws the run as the counters, the jobs and the ledger hold it', async () => {
    const t = await truth();
    const page = await open(`/overview?queue=${pool.names.queue}`);
    await expect.poll(() => value(page, 'calls'), { timeout: 15_000 }).toBe(t.done.length);
    expect(t.metrics['completed']).toBe(t.done.length);
    const calls = await seriesOf(page, 'chart-calls');
    expect(sum(calls['calls']!)).toBe(t.done.length);
    expect(sum(calls['failed']!)).toBe(t.metrics['provider_calls']! - t.metrics['provider_ok']!);
    const tokens = await seriesOf(page, 'chart-tokens');
    expect(sum(tokens['inputTokens']!)).toBe(t.metrics['tokens_in']);
    expect(sum(tokens['outputTokens']!)).toBe(t.metrics['tokens_out']);
    // 429s are the provider's only; llmq's own deferrals are counted apart.
    const sent =
      (t.metrics['provider_429_retry_after'] ?? 0) + (t.metrics['provider_429_final'] ?? 0);
    expect(sent).toBeGreaterThan(0);
    const limits = await seriesOf(page, 'chart-limits');
    expect(sum(limits['providerRateLimited']!)).toBe(sent);
    expect(await value(page, 'provider-429')).toBe(sent);
    expect(sum(limits['deferred']!)).toBe(await value(page, 'deferred'));
    // Spend: the calls' price; against the budget, what the ledger counts.
    const spent = t.spend(t.done);
    expect(await value(page, 'spend')).toBeCloseTo(spent, 6);
    expect(sum((await seriesOf(page, 'chart-spend'))['spendUsd']!)).toBeCloseTo(spent, 6);
    expect(await value(page, 'spent-global-day')).toBeCloseTo(await t.budgeted('global'), 6);
    // Latency and wait, against the calls' own measures (the history keeps bins √2 wide).
    const latencies = t.done.map((j) => j.returnvalue.latencyMs);
    const waits = [
      ...t.done.flatMap(waitsOf),
      ...(await pool.deadLetters()).flatMap((l) => triesWaits(l.data, l.attempts)),
    ];
    for (const [id, list, p] of [
      ['latency-p50', latencies, 0.5],
      ['latency-p95', latencies, 0.95],
      ['wait-p50', waits, 0.5],
      ['wait-p95', waits, 0.95],
    ] as const) {
      const want = quantile(list, p);
      // The history's bins are √2 wide: a quantile is read within its bin.
      expect(Math.abs((await value(page, id)) - want), id).toBeLessThanOrEqual(
        Math.max(5, want * 0.45),
      );
    }
    // The backlog was seen while it drained, and is empty now.
    const backlog = await seriesOf(page, 'chart-backlog');
    expect(Math.max(...backlog['backlogPeak']!.map((b) => b ?? 0))).toBeGreaterThan(0);
    expect(backlog['backlog']!.filter((b) => b !== null).at(-1)).toBe(0);
    expect(await value(page, 'dead-letters')).toBe(1);
    // Each tenant's and model's row holds its calls and spend.
    for (const [rows, key, name] of [
      ['tenant-rows', (j: Done) => j.data.tenant, 'acme'],
      ['tenant-rows', (j: Done) => j.data.tenant, 'globex'],
      ['model-rows', (j: Done) => modelOf(j.data)!, SONNET],
      ['model-rows', (j: Done) => modelOf(j.data)!, HAIKU],
    ] as const) {
      const row = page.getByTestId(rows).locator(`tr[data-name="${name}"]`);
      const mine = t.of((j) => key(j) === name);
      expect(Number(await row.getAttribute('data-calls')), name).toBe(mine.length);
      expect(Number(await row.getAttribute('data-spend-usd'))).toBeCloseTo(t.spend(mine), 6);
    }
    // Use against the global limit of 8 requests a second, drawn as a share of it.
    expect(await page.getByTestId('chart-use-limit').getAttribute('data-value')).toBe('1');
    expect(
      Math.max(...((await seriesOf(page, 'chart-use'))['requests'] as number[])),
    ).toBeGreaterThan(0);
    await shot(page, 'overview');
    // The first screen of it, as the README shows it (docs/dashboard.png is a copy).
    await page.screenshot({ path: join(SHOTS, 'overview-top.png') });

    // The run goes on: more calls show without a reload.
    for (let i = 0; i < 3; i++)
      await pool.producer.enqueue(request(`more ${i}`, 60, SONNET), { tenant: 'acme' });
    await expect.poll(() => value(page, 'calls'), { timeout: 20_000 }).toBe(t.done.length + 3);
    await page.close();
  });

  it('a range switch redraws every chart in the range’s buckets', async () => {
    const page = await open(`/overview?queue=${pool.names.queue}`);
    const chart = page.getByTestId('chart-calls');
    await expect
      .poll(() => chart.getAttribute('data-bucket-ms'), { timeout: 15_000 })
      .toBe('10000');
    const before = sum((await seriesOf(page, 'chart-calls'))['calls']!);
    for (const [range, bucketMs, buckets] of [
      ['1h', 60_000, 60],
      ['24h', 600_000, 144],
    ] as const) {
      await page.getByTestId(`range-${range}`).click();
      await expect.poll(() => chart.getAttribute('data-bucket-ms')).toBe(String(bucketMs));
      const calls = (await seriesOf(page, 'chart-calls'))['calls']!;
      expect(calls).toHaveLength(buckets);
      expect(sum(calls)).toBe(before);
      expect((await seriesOf(page, 'chart-wait'))['p95']).toHaveLength(buckets);
      expect(await page.getByTestId(`range-${range}`).getAttribute('aria-pressed')).toBe('true');
      expect(new URL(page.url()).searchParams.get('range')).toBe(range);
    }
    await shot(page, 'overview-24h');
    await page.close();
  });

  it("a tenant's page: use against its limit and budget, its jobs linked into Bull Board", async () => {
    const t = await truth();
    const acme = t.of((j) => j.data.tenant === 'acme');
    const page = await open(`/tenant?queue=${pool.names.queue}&name=acme`);
    await expect.poll(() => value(page, 'calls'), { timeout: 15_000 }).toBe(acme.length);
    expect(await value(page, 'spend')).toBeCloseTo(t.spend(acme), 6);
    expect(await value(page, 'use-tenant:acme-requests-limit')).toBe(40);
    expect(await value(page, 'spent-tenant:acme-day')).toBeCloseTo(
      await t.budgeted('tenant:acme'),
      6,
    );
    expect((await seriesOf(page, 'chart-use'))['requests']).toBeDefined();
    // Its latest tries: each success, each 429 and the 400, up to 20.
    const letterTries = (await pool.deadLetters()).find((l) => l.jobId === bad)!.attempts.length;
    const tries = sum(acme.map((j) => (j.data.history?.length ?? 0) + 1)) + letterTries;
    const finished = page.getByTestId('finished-rows').locator('tr[data-job]');
    await expect.poll(() => finished.count()).toBe(Math.min(20, tries));
    const letter = page.getByTestId('finished-rows').locator(`tr[data-job="${bad}"]`);
    expect(await letter.textContent()).toContain('dead letter');
    await shot(page, 'tenant');
    await letter.locator('a').click();
    await page.waitForURL(`${dashboard.baseUrl}/queue/${pool.names.queue}-dead/${bad}`);
    await expect
      .poll(() => page.locator('body').textContent(), { timeout: 15_000 })
      .toContain('max_tokens: 2000 > 1000');
    await shot(page, 'dead-letter');
    await page.close();
  });

  it("a model's page says which limits hold it", async () => {
    const t = await truth();
    const page = await open(`/model?queue=${pool.names.queue}&name=${HAIKU}`);
    const haiku = t.of((j) => modelOf(j.data)! === HAIKU);
    await expect.poll(() => value(page, 'calls'), { timeout: 15_000 }).toBe(haiku.length);
    expect(await page.getByTestId('limit-rows-empty').textContent()).toContain(
      `No model scope matches ${HAIKU}`,
    );
    // No budget names a model: its spend shows, against none.
    expect(await value(page, `spent-model:${HAIKU}-day`)).toBeCloseTo(
      await t.budgeted(`model:${HAIKU}`),
      6,
    );
    expect(await page.getByTestId('budget-rows').textContent()).toContain('no budget');
    await shot(page, 'model');
    await page.close();
  });

  it("Bull Board: llmq's bar, a dead letter once, no warning on it, no CSP error", async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const errors: string[] = [];
    const elsewhere: string[] = [];
    page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
    page.on('request', (r) => !r.url().startsWith(dashboard.baseUrl) && elsewhere.push(r.url()));
    await page.goto(`${dashboard.baseUrl}/?token=${TOKEN}`, { waitUntil: 'domcontentloaded' });
    const card = (queue: string) =>
      page
        .locator('li')
        .filter({ has: page.locator(`a[href="/queue/${queue}"]`) })
        .last();
    const q = pool.names.queue;
    await expect
      .poll(() => card(`${q}-dead`).textContent(), { timeout: 15_000 })
      .toMatch(/Failed\s*1/i);
    expect(await card(q).textContent()).not.toMatch(/failed/i);
    expect(await page.getByText('No workers').count()).toBe(0);
    const counts = (await page.evaluate(async () => {
      const body = (await (await fetch('api/queues')).json()) as {
        queues: { counts: Record<string, number> }[];
      };
      return body.queues.map((x: { counts: Record<string, number> }) => x.counts);
    })) as Record<string, number>[];
    expect(sum(counts.map((c) => c['failed'] ?? 0))).toBe(1);
    expect(sum(counts.map((c) => c['waiting'] ?? 0))).toBe(0);
    await shot(page, 'board');
    await page.goto(`${dashboard.baseUrl}/queue/${q}-dead`, { waitUntil: 'domcontentloaded' });
    await expect
      .poll(() => page.locator('body').textContent(), { timeout: 15_000 })
      .toContain('max_tokens: 2000 > 1000');
    await shot(page, 'dead-letters');
    await page.getByTestId('nav-overview').click();
    await page.waitForURL(`${dashboard.baseUrl}/overview`);
    await expect.poll(() => value(page, 'dead-letters'), { timeout: 15_000 }).toBe(1);
    expect(errors).toEqual([]);
    expect(elsewhere).toEqual([]);
    await page.close();
  });

  it('the limiter page counts deferrals apart from the 429s the provider sent', async () => {
    const t = await truth();
    const page = await open(`/limiter?queue=${pool.names.queue}`);
    const sent =
      (t.metrics['provider_429_retry_after'] ?? 0) + (t.metrics['provider_429_final'] ?? 0);
    await expect.poll(() => value(page, 'rejected-provider'), { timeout: 15_000 }).toBe(sent);
    const denied = Number(await pool.redis.hget(limiterKeys(pool.names).stats, 'denied_budget'));
    expect(await value(page, 'rejected-llmq')).toBe(denied || 0);
    expect(await page.locator('.tile h3').allTextContents()).toContain('Deferrals by llmq');
    // The chart: what the successful calls reserved at admission (as the limiter settled them)
    // beside what they used (as the provider reported it).
    const stats = await pool.redis.hgetall(limiterKeys(pool.names).stats);
    expect(Number(stats['settled'])).toBe(t.done.length);
    const chart = await seriesOf(page, 'chart');
    expect(sum(chart['reserved']!)).toBe(
      Number(stats['settled_reserved_in']) + Number(stats['settled_reserved_out']),
    );
    const used = t.done.map((j) => {
      const u = j.returnvalue.message.usage;
      return u.input_tokens + (u.cache_creation_input_tokens ?? 0) + u.output_tokens;
    });
    expect(sum(chart['actual']!)).toBe(sum(used));
    expect(sum(chart['reserved']!)).toBeGreaterThan(sum(used));
    await shot(page, 'limiter');
    await page.close();
  });
});
