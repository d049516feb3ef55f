import { join } from 'node:path';
import type { Redis } from 'ioredis';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DashboardHandle, startDashboard } from '../dashboard/server.ts';
import { Producer } from '../producer/producer.ts';
import { Limiter } from '../shared/limiter/limiter.ts';
import { MetricsWriter } from '../shared/metrics.ts';
import { launchChromium, skipWithoutChromium } from './fixtures/chromium.ts';
import { deleteKeys, newRedis, settle, testNames } from './helpers.ts';

// In CI the browser must be there (.ci/run installs it); elsewhere a missing one skips, loudly.
const skip = skipWithoutChromium('dashboard-browser');
/** Set to a folder to keep screenshots of the pages for a look (never committed). */
const SHOTS = process.env['LLMQ_DASHBOARD_SCREENSHOTS'];
const TOKEN = 'browser-test-token-5b1f';

const request = (text: string) => ({
  model: 'claude-sonnet-4-5',
  max_tokens: 200,
  messages: [{ role: 'user', content: text }],
});

describe.skipIf(skip)('the dashboard in a browser', () => {
  let redis: Redis;
  let names: ReturnType<typeof testNames>;
  let producer: Producer;
  let limiter: Limiter;
  let dashboard: DashboardHandle;
  let browser: Browser;

  beforeAll(async () => {
    redis = newRedis();
    names = testNames('dashb');
    producer = new Producer({ redis, names });
    for (let i = 0; i < 3; i++) await producer.enqueue(request(`job ${i}`));
    // A worker would publish its limits and fill the window; the test does it with a Limiter.
    limiter = new Limiter({ redis, names, limits: { tokens: 4_000 }, concurrency: 8 });
    await limiter.publishConfig();
    const first = await limiter.tryAcquire({ requests: 1, inputTokens: 600, outputTokens: 1_000 });
    if (!first.ok) throw new Error(`the first call was refused: ${JSON.stringify(first)}`);
    // The provider used 500 input tokens of the 600 estimated; output stays charged (reserve).
    await settle(limiter, first.reservation, { inputTokens: 500, outputTokens: 700 });
    // The worker writes the call to the usage history: what its reservation held, what it used.
    await new MetricsWriter(redis, names, { flushMs: 0 }).observe({
      model: 'claude-sonnet-4-5',
      tenant: undefined,
      ok: true,
      waitMs: 0,
      callMs: 100,
      inputTokens: 500,
      outputTokens: 700,
      reservedInputTokens: first.reservation.cost.inputTokens,
      reservedOutputTokens: first.reservation.cost.outputTokens,
    });
    dashboard = await startDashboard({
      redis,
      prefix: names.prefix,
      port: 0,
      auth: { token: TOKEN },
    });
    browser = await launchChromium();
  });

  afterAll(async () => {
    await browser?.close();
    await dashboard?.close();
    await producer?.close();
    if (redis) {
      await deleteKeys(redis, names.prefix);
      redis.disconnect();
    }
  });

  async function newPage(): Promise<Page> {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    // Bull Board's page links a web font; there is no internet, so fail it at once.
    await page.route(/^https?:\/\/(?!127\.0\.0\.1[:/])/, (route) => route.abort());
    return page;
  }

  const text = (page: Page, testId: string) => page.getByTestId(testId).textContent();

  it('logs in with ?token=, drops it from the address, and shows the queue with its jobs', async () => {
    const page = await newPage();
    const response = await page.goto(`${dashboard.baseUrl}/?token=${TOKEN}`, {
      waitUntil: 'domcontentloaded',
    });
    expect(response?.status()).toBe(200);
    expect(page.url()).toBe(`${dashboard.baseUrl}/`);
    const cookies = await page.context().cookies();
    expect(cookies).toHaveLength(1);
    expect(cookies[0]).toMatchObject({ httpOnly: true, sameSite: 'Strict' });
    expect(cookies[0]!.value).not.toContain(TOKEN);

    // Bull Board's own XHRs (the cookie) fill the overview: the queue, its dead letters, 3 jobs.
    const card = page
      .locator('li')
      .filter({ has: page.locator(`a[href="/queue/${names.queue}"]`) })
      .last();
    await expect.poll(() => card.textContent(), { timeout: 15_000 }).toMatch(/3\s*Jobs/);
    await expect
      .poll(() => page.locator(`a[href="/queue/${names.queue}-dead"]`).count())
      .toBeGreaterThan(0);
    if (SHOTS) await page.screenshot({ path: join(SHOTS, 'board.png'), fullPage: true });

    const html = await page.content();
    expect(html).not.toContain(TOKEN);

    // The limiter's page is linked from Bull Board's header menu.
    await page.locator('ul[class^="actions"] > li').last().locator('button').click();
    await page.getByText('Limiter (live budget view)').click();
    await page.waitForURL(`${dashboard.baseUrl}/limiter`);
    await expect
      .poll(() => page.getByTestId('use-global-tokens-limit').textContent())
      .toBe('4,000');
    await page.close();
  });

  it("shows the limiter's window as the test filled it, and follows it live", async () => {
    const page = await newPage();
    await page.goto(`${dashboard.baseUrl}/?token=${TOKEN}`, { waitUntil: 'domcontentloaded' });
    await page.goto(`${dashboard.baseUrl}/limiter?queue=${names.queue}`, {
      waitUntil: 'domcontentloaded',
    });

    await expect
      .poll(() => text(page, 'use-global-tokens-used'), { timeout: 10_000 })
      .toBe('1,500');
    expect(await text(page, 'use-global-tokens-limit')).toBe('4,000');
    // What a call may take now, as acquire counts it: the 2,500 the window has left.
    expect(await text(page, 'use-global-tokens-free')).toBe('2,500');
    expect(await page.getByTestId('use-global-tokens-used').getAttribute('data-value')).toBe(
      '1500',
    );
    expect(await text(page, 'use-global-inputTokens-used')).toBe('500');
    expect(await text(page, 'use-global-outputTokens-used')).toBe('1,000');
    expect(await text(page, 'slots-in-flight')).toBe('0');
    expect(await text(page, 'slots-cap')).toBe('8');
    expect(await text(page, 'accuracy-input')).toBe('83%');
    expect(await text(page, 'depth-waiting')).toBe('3');
    expect(await text(page, 'depth-bound')).toBe('10,000');
    // What Redis holds, by state, against the bounds (none given to this dashboard).
    expect(await text(page, 'held-running')).toBe('0 B');
    expect(await text(page, 'held-dead')).toBe('0 B');
    expect(await text(page, 'held-dead-bound')).toBe('\u221e');
    expect(await text(page, 'pause-state')).toBe('none');
    expect(await text(page, 'breaker-state')).toBe('closed');
    // The chart: one 10 s bucket, the estimate (600 + 1,000) beside the usage (500 + 700).
    const chart = page.getByTestId('chart');
    expect(await chart.getAttribute('data-buckets')).toBe('1');
    const series = JSON.parse((await chart.getAttribute('data-series')) ?? '{}') as Record<
      string,
      number[]
    >;
    expect(series['reserved']!.filter((n) => n > 0)).toEqual([1_600]);
    expect(series['actual']!.filter((n) => n > 0)).toEqual([1_200]);
    expect(series['actual']).toHaveLength(90);

    // More spend, a shared pause and a refusal by llmq's own limit: the page follows without a reload.
    const more = await limiter.tryAcquire({ requests: 1, inputTokens: 200, outputTokens: 300 });
    expect(more.ok).toBe(true);
    const refused = await limiter.tryAcquire({
      requests: 1,
      inputTokens: 1_000,
      outputTokens: 2_000,
    });
    expect(refused).toMatchObject({ ok: false, reason: 'budget' });
    await limiter.pauseFor(30_000);
    await expect.poll(() => text(page, 'use-global-tokens-used'), { timeout: 5_000 }).toBe('2,000');
    // The refused 3,000 was more than the 2,000 free.
    expect(await text(page, 'use-global-tokens-free')).toBe('2,000');
    await expect.poll(() => text(page, 'pause-state')).toBe('paused');
    expect(
      Number(await page.getByTestId('pause-remaining').getAttribute('data-value')),
    ).toBeGreaterThan(20_000);
    expect(await text(page, 'rejected-llmq')).toBe('1');
    expect(await text(page, 'slots-in-flight')).toBe('1');
    if (SHOTS) await page.screenshot({ path: join(SHOTS, 'limiter.png'), fullPage: true });

    // And back to Bull Board by the bar's link.
    await page.getByTestId('nav-board').click();
    await page.waitForURL(`${dashboard.baseUrl}/`);
    await page.close();
  });

  it('refuses a browser without credentials with a 401 page', async () => {
    const page = await newPage();
    const response = await page.goto(`${dashboard.baseUrl}/limiter`, {
      waitUntil: 'domcontentloaded',
    });
    expect(response?.status()).toBe(401);
    expect(await page.locator('h1').textContent()).toContain('401');
    const wrong = await page.goto(`${dashboard.baseUrl}/?token=not-the-token`, {
      waitUntil: 'domcontentloaded',
    });
    expect(wrong?.status()).toBe(401);
    expect(await page.context().cookies()).toHaveLength(0);
    await page.close();
  });
});
