import { existsSync } from 'node:fs';
import { type Browser, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DashboardHandle, startDashboard } from '../dashboard/server.ts';
import { allCompleted, openPool, type Pool, request } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const CHROMIUM = '/usr/bin/chromium';
// As in dashboard-browser: CI has the browser; elsewhere a missing one skips, loudly.
const skip = !existsSync(CHROMIUM) && !process.env['CI'];
if (skip) console.warn(`telemetry-board: skipped, ${CHROMIUM} is absent`);
const TOKEN = 'board-telemetry-token-77';

describe.skipIf(skip)('a job’s history and the forecast in the dashboard', () => {
  let pool: Pool;
  let dashboard: DashboardHandle;
  let browser: Browser;
  let waited: string;

  beforeAll(async () => {
    pool = await openPool('board', { latencyMs: 20, outputShare: 1 });
    const limits = { outputTokens: 100 };
    await pool.worker({ limiter: { limits, windowMs: 1_000, headroom: 0 } });
    const ids = [
      await pool.producer.enqueue(request('One.', 80)),
      await pool.producer.enqueue(request('Two.', 80)),
    ];
    waited = ids[1]!;
    await allCompleted(pool, ids, 20_000);
    await until(async () => (await pool.queue.getJobLogs(waited)).count >= 2, 5_000);
    // A backlog held back by output tokens, for the forecast.
    await pool.queue.pause();
    await pool.producer.enqueueMany(
      [1, 2, 3].map((i) => request(`later ${i}`, 80)),
      {
        priority: 'batch',
      },
    );
    dashboard = await startDashboard({
      redis: pool.redis,
      prefix: pool.names.prefix,
      port: 0,
      auth: { token: TOKEN },
    });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'],
    });
  });

  afterAll(async () => {
    await browser?.close();
    await dashboard?.close();
    await pool?.cleanup();
  });

  it('Bull Board’s Logs tab shows why the job waited and how its call went', async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await page.route(/^https?:\/\/(?!127\.0\.0\.1[:/])/, (route) => route.abort());
    await page.goto(`${dashboard.baseUrl}/?token=${TOKEN}`, { waitUntil: 'domcontentloaded' });
    await page.goto(`${dashboard.baseUrl}/queue/${pool.names.queue}/${waited}`, {
      waitUntil: 'domcontentloaded',
    });
    await page
      .getByRole('tab', { name: /logs/i })
      .or(page.getByText(/^Logs$/))
      .first()
      .click();
    await expect
      .poll(() => page.locator('body').textContent(), { timeout: 15_000 })
      .toMatch(/admitted after .*budget \(global outputTokens\)/);
    expect(await page.locator('body').textContent()).toMatch(
      /call ok in .*: \d+ input, 80 output tokens/,
    );
    await page.close();
  });

  it('the limiter page forecasts the backlog and names the binding dimension', async () => {
    const page = await browser.newPage();
    await page.goto(`${dashboard.baseUrl}/?token=${TOKEN}`, { waitUntil: 'domcontentloaded' });
    await page.goto(`${dashboard.baseUrl}/limiter?queue=${pool.names.queue}`, {
      waitUntil: 'domcontentloaded',
    });
    const row = page.getByTestId('forecast-rows').locator('tr[data-priority="1000"]');
    await expect
      .poll(() => row.getAttribute('data-binding'), { timeout: 15_000 })
      .toBe('outputTokens');
    expect(await row.textContent()).toMatch(/^batch \(1000\)3/);
    await page.close();
  });
});
