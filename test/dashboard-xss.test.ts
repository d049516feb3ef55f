/**
 * Markup in anything the dashboard shows (queue names, tenants, job data, labels, results,
 * errors, dead letters) is rendered as text: the test finds each payload in the page's text and
 * no element made from it. The browser ignores the page's CSP here, so a payload taken for HTML
 * would also run; the CSP itself is checked on its own.
 */
import type { Redis } from 'ioredis';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DashboardHandle, startDashboard } from '../dashboard/server.ts';
import { Producer } from '../producer/producer.ts';
import type { QueueNames } from '../shared/keys.ts';
import { Limiter } from '../shared/limiter/limiter.ts';
import { launchChromium, skipWithoutChromium } from './fixtures/chromium.ts';
import { type FakeAnswer, startFakeWorker } from './fixtures/fake-worker.ts';
import { deleteKeys, newRedis, testNames, until } from './helpers.ts';

const skip = skipWithoutChromium('dashboard-xss');
const TOKEN = 'xss-test-token-7c2d';

/**
 * Markup that would make an element with id or class `xss-<field>`, and run a script setting
 * `window.__xss`, if a page took it for HTML. No spaces: it must fit a scope name too (quoted
 * attributes, each followed by a slash, need none).
 */
function hostile(field: string): string {
  return `<img/id='xss-${field}'/src='x'/onerror='window.__xss=1'><b/class='xss-${field}'>${field}`;
}

const FIELDS = {
  // A queue name is a URL segment of at most 100 characters, encoded: an element, no script.
  queue: "<b/class='xss-queue'>Q",
  tenant: hostile('tenant'),
  data: hostile('data'),
  meta: hostile('meta'),
  result: hostile('result'),
  waiting: hostile('waiting'),
  reason: hostile('reason'),
  errorClass: hostile('class'),
  deadData: `fail${hostile('dead-data')}`,
} as const;

describe.skipIf(skip)('the dashboard renders hostile names and messages as text', () => {
  let redis: Redis;
  let names: QueueNames;
  let producer: Producer;
  let dashboard: DashboardHandle;
  let browser: Browser;
  let context: BrowserContext;

  beforeAll(async () => {
    redis = newRedis();
    const prefix = testNames('xss').prefix;
    names = { prefix, queue: `q${FIELDS.queue}` };
    producer = new Producer({ redis, names });
    const ask = (content: string) => ({
      model: 'claude-test',
      max_tokens: 20,
      messages: [{ role: 'user' as const, content }],
    });
    // Tenants are checked at enqueue (letters, digits, _.@-); the limiter's scopes are not.
    await producer.enqueue(ask(FIELDS.data), { tenant: 'acme', meta: { note: FIELDS.meta } });
    await producer.enqueue(ask(FIELDS.deadData));
    // A stand-in worker: the answers and dead letters carry the markup, as a provider's might.
    const worker = startFakeWorker(
      redis,
      names,
      (prompt): FakeAnswer =>
        prompt.startsWith('fail')
          ? {
              deadLetter: {
                reason: `400 invalid_request_error: ${FIELDS.reason}`,
                errorClass: FIELDS.errorClass,
                status: 400,
              },
            }
          : { text: FIELDS.result, usage: { input_tokens: 3, output_tokens: 2 } },
    );
    await until(async () => (await producer.queue.getCompletedCount()) === 1);
    await until(async () => (await producer.queue.getFailedCount()) === 1);
    await worker.close();
    // And one that waits, its data on show.
    await producer.enqueue(ask(FIELDS.waiting), { meta: { note: FIELDS.meta } });
    const scope = `tenant:${FIELDS.tenant}`;
    const limiter = new Limiter({
      redis,
      names,
      limits: { tokens: 4_000 },
      scopes: { [scope]: { tokens: 2_000 } },
    });
    await limiter.publishConfig();
    const spent = await limiter.tryAcquire(
      { requests: 1, inputTokens: 100, outputTokens: 100 },
      { scopes: [scope] },
    );
    expect(spent.ok).toBe(true);
    dashboard = await startDashboard({ redis, prefix, port: 0, auth: { token: TOKEN } });
    browser = await launchChromium();
    // The page's CSP would stop a script an injection made: here it must not hide one.
    context = await browser.newContext({ bypassCSP: true });
    // Only this machine (Bull Board links a web font).
    await context.route(/^https?:\/\/(?!127\.0\.0\.1[:/])/, (route) => route.abort());
    const login = await context.newPage();
    await login.goto(`${dashboard.baseUrl}/?token=${TOKEN}`, { waitUntil: 'domcontentloaded' });
    await login.close();
  });

  afterAll(async () => {
    await context?.close();
    await browser?.close();
    await dashboard?.close();
    await producer?.close();
    if (redis) {
      await deleteKeys(redis, names.prefix);
      redis.disconnect();
    }
  });

  /**
   * Opens a page, and once it shows the queue, expands every collapsed part of the job JSON
   * (nested values are drawn only then); resolves with its text once it holds `fields`.
   */
  async function open(
    path: string,
    fields: readonly string[],
    tab?: string,
  ): Promise<{ page: Page; text: string }> {
    const page = await context.newPage();
    const res = await page.goto(dashboard.baseUrl + path, { waitUntil: 'domcontentloaded' });
    expect(res?.status()).toBe(200);
    // biome-ignore lint/performance/useDomNodeTextContent: the rendered text, as a reader sees it
    const text = () => page.locator('body').innerText();
    await expect.poll(text, { timeout: 20_000 }).toContain(FIELDS.queue);
    if (tab)
      await page
        .getByRole('tab', { name: tab })
        .or(page.getByText(tab, { exact: true }))
        .first()
        .click();
    const expand = page.locator('[aria-label="expand JSON"]');
    let shown = '';
    await expect
      .poll(
        async () => {
          while ((await expand.count()) > 0) await expand.first().click();
          shown = await text();
          return fields.filter((f) => !shown.includes(f));
        },
        { timeout: 20_000 },
      )
      .toEqual([]);
    return { page, text: shown };
  }

  /** Elements made from a payload, and whether one of its scripts ran (run in the page). */
  const injected = (page: Page) =>
    page.evaluate(`({
      elements: [...document.querySelectorAll('[id^="xss-"], [class*="xss-"]')].map((e) => e.outerHTML),
      ran: window.__xss ?? null,
    })`) as Promise<{ elements: string[]; ran: unknown }>;

  const q = () => encodeURIComponent(names.queue);
  const dead = () => encodeURIComponent(`${names.queue}-dead`);
  const PAGES: [string, () => string, (keyof typeof FIELDS)[], string?][] = [
    ["Bull Board's overview", () => '/', ['queue']],
    ['waiting jobs', () => `/queue/${q()}?status=prioritized`, ['waiting', 'meta']],
    ['completed jobs', () => `/queue/${q()}?status=completed`, ['data', 'meta', 'result']],
    // A dead-lettered job shows among the dead letters (not also under failed): its reason…
    ['dead letters', () => `/queue/${dead()}`, ['reason', 'errorClass']],
    // …and its data.
    ["a dead letter's data", () => `/queue/${dead()}`, ['deadData'], 'Data'],
    ['the limiter page', () => `/limiter?queue=${q()}`, ['queue', 'tenant']],
    ["llmq's overview", () => `/overview?queue=${q()}`, ['queue']],
    [
      "a tenant's page",
      () => `/tenant?queue=${q()}&name=${encodeURIComponent(FIELDS.tenant)}`,
      ['queue', 'tenant'],
    ],
  ];

  it.each(PAGES)(
    '%s show each field as text and make no element of it',
    async (_, path, shown, tab) => {
      const { page, text } = await open(
        path(),
        shown.map((f) => FIELDS[f]),
        tab,
      );
      try {
        for (const field of shown) expect(text, field).toContain(FIELDS[field]);
        // Let its polls and lazy parts settle, then look for anything a payload made.
        await page.waitForLoadState('networkidle').catch(() => {});
        expect(await injected(page)).toEqual({ elements: [], ran: null });
      } finally {
        await page.close();
      }
    },
  );

  it('the check can fail: the same payload given to the page as HTML makes its element', async () => {
    const page = await context.newPage();
    try {
      await page.goto(`${dashboard.baseUrl}/limiter`, { waitUntil: 'domcontentloaded' });
      await page.evaluate(
        `document.body.insertAdjacentHTML('beforeend', ${JSON.stringify(FIELDS.result)})`,
      );
      expect((await injected(page)).elements.length).toBeGreaterThan(0);
      // And its script runs: the page's CSP does not hide one here.
      await expect.poll(async () => (await injected(page)).ran).not.toBeNull();
    } finally {
      await page.close();
    }
  });

  it('sets a Content-Security-Policy that forbids inline script on every page', async () => {
    const headers = { authorization: `Bearer ${TOKEN}` };
    for (const path of ['/', '/limiter', '/overview', '/tenant?name=acme', `/queue/${q()}`]) {
      const csp = (await fetch(dashboard.baseUrl + path, { headers })).headers.get(
        'content-security-policy',
      );
      expect(csp, path).toMatch(/script-src '(self|nonce-[^']+)'/);
      expect(csp!.split(';').find((d) => d.trim().startsWith('script-src'))).not.toContain(
        'unsafe',
      );
      expect(csp, path).toMatch(/(object|default)-src 'none'/);
    }
  });
});
