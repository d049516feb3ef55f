import { createServer, type Server } from 'node:http';
import type { Redis } from 'ioredis';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DashboardHandle, startDashboard } from '../dashboard/server.ts';
import { Producer } from '../producer/producer.ts';
import type { QueueNames } from '../shared/keys.ts';
import { Limiter } from '../shared/limiter/limiter.ts';
import { launchChromium, skipWithoutChromium } from './fixtures/chromium.ts';
import { type FakeAnswer, type FakeWorker, startFakeWorker } from './fixtures/fake-worker.ts';
import { deleteKeys, newRedis, testNames, until } from './helpers.ts';

const skip = skipWithoutChromium('dashboard-xss');
const TOKEN = 'xss-test-token-7c2d';

const beaconHits: string[] = [];
let beacon: Server;
let beaconPort = 0;

/** Markup that would run script, or fetch the beacon, if a page took it for HTML. */
function hostile(where: string): string {
  const to = `http://127.0.0.1:${beaconPort}/${where}`;
  return (
    `${where}:<script>fetch('${to}-script');alert('${where}')</script>` +
    `<img src=x onerror="fetch('${to}-onerror');alert('${where}')">` +
    `"><svg onload=alert('${where}')><img src="${to}-img"><a href="javascript:alert(1)">x</a>`
  );
}

describe.skipIf(skip)('the dashboard renders hostile names and messages as text', () => {
  let redis: Redis;
  let prefix: string;
  let names: QueueNames;
  let producer: Producer;
  let worker: FakeWorker;
  let limiter: Limiter;
  let dashboard: DashboardHandle;
  let browser: Browser;
  let tenant: string;
  const dialogs: string[] = [];

  beforeAll(async () => {
    beacon = createServer((req, res) => {
      beaconHits.push(req.url ?? '');
      res.end();
    });
    await new Promise<void>((r) => beacon.listen(0, '127.0.0.1', r));
    beaconPort = (beacon.address() as { port: number }).port;
    redis = newRedis();
    prefix = testNames('xss').prefix;
    // A queue name is a Redis key part: no slash, no braces; the rest of the markup goes in.
    names = { prefix, queue: `evil<img src=x onerror=alert(1)>"'&q` };
    // A scope name has no spaces, "|" or ",".
    tenant = `<script>alert('tenant')</script><img/src=x/onerror=fetch('http://127.0.0.1:${beaconPort}/tenant')>`;
    producer = new Producer({ redis, names });
    await producer.enqueue(
      {
        model: 'claude-test',
        max_tokens: 20,
        messages: [{ role: 'user', content: hostile('done') }],
      },
      // Tenants are checked at enqueue (letters, digits, _.@-); the limiter's scopes are not.
      { tenant: 'acme', meta: { note: hostile('meta') } },
    );
    await producer.enqueue({
      model: 'claude-test',
      max_tokens: 20,
      messages: [{ role: 'user', content: 'fail' }],
    });
    worker = startFakeWorker(
      redis,
      names,
      (prompt): FakeAnswer =>
        prompt === 'fail'
          ? {
              deadLetter: {
                reason: `400 invalid_request_error: ${hostile('reason')}`,
                errorClass: hostile('class'),
                status: 400,
              },
            }
          : { text: hostile('result'), usage: { input_tokens: 3, output_tokens: 2 } },
    );
    await until(async () => (await producer.queue.getCompletedCount()) === 1);
    await until(async () => (await producer.queue.getFailedCount()) === 1);
    await worker.close();
    // And one that waits, with its data on show.
    await producer.enqueue(
      {
        model: 'claude-test',
        max_tokens: 20,
        messages: [{ role: 'user', content: hostile('data') }],
      },
      { meta: { note: hostile('meta') } },
    );
    const scope = `tenant:${tenant}`;
    limiter = new Limiter({
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
  });

  afterAll(async () => {
    await browser?.close();
    await dashboard?.close();
    await producer?.close();
    if (redis) {
      await deleteKeys(redis, prefix);
      redis.disconnect();
    }
    beacon?.close();
  });

  async function open(path: string, shows: string): Promise<Page> {
    const page = await browser.newPage();
    page.on('dialog', (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });
    // Only this machine: the beacon and the dashboard (Bull Board links a web font).
    await page.route(/^https?:\/\/(?!127\.0\.0\.1[:/])/, (route) => route.abort());
    await page.goto(`${dashboard.baseUrl}/?token=${TOKEN}`, { waitUntil: 'domcontentloaded' });
    const res = await page.goto(dashboard.baseUrl + path, { waitUntil: 'domcontentloaded' });
    expect(res?.status()).toBe(200);
    // The markup is there as text: the page rendered it, and did not take it for HTML.
    await expect
      .poll(() => page.locator('body').textContent(), { timeout: 20_000 })
      .toContain(shows);
    return page;
  }

  it('sets a Content-Security-Policy that forbids inline script on every page', async () => {
    const headers = { authorization: `Bearer ${TOKEN}` };
    for (const path of ['/', '/limiter', `/queue/${encodeURIComponent(names.queue)}`]) {
      const csp = (await fetch(dashboard.baseUrl + path, { headers })).headers.get(
        'content-security-policy',
      );
      expect(csp, path).toMatch(/script-src '(self|nonce-[^']+)'/);
      expect(csp, path).not.toContain("unsafe-inline'; script");
      expect(csp!.split(';').find((d) => d.trim().startsWith('script-src'))).not.toContain(
        'unsafe',
      );
      expect(csp, path).toMatch(/(object|default)-src 'none'/);
    }
  });

  it('runs no script from queue names, tenants, job data, results, errors or dead letters', async () => {
    const q = encodeURIComponent(names.queue);
    const pages = [
      ['/', names.queue],
      [`/queue/${q}?status=prioritized`, "meta:<script>fetch('"],
      [`/queue/${q}?status=completed`, "meta:<script>fetch('"],
      [`/queue/${q}?status=failed`, 'reason:<script>'],
      [`/queue/${encodeURIComponent(`${names.queue}-dead`)}`, 'reason:<script>'],
      [`/limiter?queue=${q}`, "tenant:<script>alert('tenant')"],
    ] as const;
    for (const [path, shows] of pages) {
      const page = await open(path, shows);
      // Let the page settle (its polls and lazy parts), then look for any sign of a script.
      await page.waitForLoadState('networkidle').catch(() => {});
      await page.close();
    }
    expect(dialogs).toEqual([]);
    expect(beaconHits).toEqual([]);
  }, 180_000);
});
