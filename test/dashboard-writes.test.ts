import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Redis } from 'ioredis';
import type { Browser, BrowserContext } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DashboardHandle, startDashboard } from '../dashboard/server.ts';
import { Producer } from '../producer/producer.ts';
import { launchChromium, skipWithoutChromium } from './fixtures/chromium.ts';
import { deleteKeys, newRedis, testNames, until } from './helpers.ts';

const skip = skipWithoutChromium('dashboard-writes');
const USER = 'ops';
const PASSWORD = 'csrf-test-pa55';

const request = (text: string) => ({
  model: 'claude-sonnet-4-5',
  max_tokens: 100,
  messages: [{ role: 'user', content: text }],
});

/** A page of another origin (another port of the same host) that tries to add jobs. */
function attackerPage(addUrl: string): string {
  const body = JSON.stringify({ name: 'x', data: request('from another origin'), options: {} });
  return `<!doctype html><html><head><title>waiting</title></head><body><script>
    (async () => {
      const url = ${JSON.stringify(addUrl)};
      navigator.sendBeacon(url, ${JSON.stringify(body)});
      await fetch(url, { method: 'POST', mode: 'no-cors', credentials: 'include',
        headers: { 'content-type': 'text/plain' }, body: ${JSON.stringify(body)} }).catch(() => {});
      await fetch(url, { method: 'POST', mode: 'no-cors', credentials: 'include' }).catch(() => {});
      document.title = 'sent';
    })();
  </script></body></html>`;
}

describe.skipIf(skip)('the dashboard refuses writes from other origins', () => {
  let redis: Redis;
  let names: ReturnType<typeof testNames>;
  let producer: Producer;
  let dashboard: DashboardHandle;
  let browser: Browser;
  let context: BrowserContext;
  let attacker: Server;

  beforeAll(async () => {
    redis = newRedis();
    names = testNames('csrf');
    producer = new Producer({ redis, names });
    await producer.enqueue(request('the one job'));
    dashboard = await startDashboard({
      redis,
      prefix: names.prefix,
      port: 0,
      auth: { user: USER, password: PASSWORD },
    });
    const addUrl = `${dashboard.baseUrl}/api/queues/${names.queue}/add`;
    attacker = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      res.end(attackerPage(addUrl));
    });
    attacker.listen(0, '127.0.0.1');
    await once(attacker, 'listening');
    browser = await launchChromium();
    // The browser holds the Basic credentials, as after a sign-in prompt.
    context = await browser.newContext({
      httpCredentials: { username: USER, password: PASSWORD },
    });
    await context.route(/^https?:\/\/(?!127\.0\.0\.1[:/])/, (route) => route.abort());
  });

  afterAll(async () => {
    await context?.close();
    await browser?.close();
    attacker?.close();
    await dashboard?.close();
    await producer?.close();
    if (redis) {
      await deleteKeys(redis, names.prefix);
      redis.disconnect();
    }
  });

  const jobs = async () =>
    Object.values(await producer.queue.getJobCounts()).reduce((a, b) => a + b, 0);

  it('a page on another port with the credentials cached adds nothing (fetch no-cors, sendBeacon)', async () => {
    // Signed in: the board's page, its cookie, its cached credentials.
    const board = await context.newPage();
    expect((await board.goto(`${dashboard.baseUrl}/`))?.status()).toBe(200);
    // Each answer, as the browser saw it before it kept it from the page (an opaque answer).
    const statuses: number[] = [];
    context.on('response', (res) => {
      if (res.url().endsWith('/add')) statuses.push(res.status());
    });
    const page = await context.newPage();
    await page.goto(`http://127.0.0.1:${(attacker.address() as AddressInfo).port}/`);
    await until(async () => (await page.title()) === 'sent' && statuses.length >= 3, 15_000, 50);
    // Every try reached the dashboard and was refused; the queue holds its one job still.
    expect(statuses.every((s) => s === 403)).toBe(true);
    expect(await jobs()).toBe(1);
  });

  it("the dashboard's own pages add a job through the producer's validation", async () => {
    const page = await context.newPage();
    await page.goto(`${dashboard.baseUrl}/`);
    const add = (body: unknown) =>
      page.evaluate(
        async ([url, b]) => {
          const res = await fetch(url as string, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            ...(b === null ? {} : { body: JSON.stringify(b) }),
          });
          return { status: res.status, text: await res.text() };
        },
        [`/api/queues/${names.queue}/add`, body] as const,
      );
    const empty = await add({ name: 'x', data: {}, options: {} });
    expect(empty.status).toBe(400);
    expect(empty.text).toMatch(/Messages request: invalid request: model/);
    const bodiless = await add(null);
    expect(bodiless.status).toBe(400);
    expect(await jobs()).toBe(1);

    const good = await add({ name: 'x', data: request('added by hand'), options: { priority: 5 } });
    expect(good.status).toBe(200);
    expect(await jobs()).toBe(2);
    const added = (await producer.queue.getJobs(['prioritized'])).find(
      (j) => j.data.request.messages[0]?.content === 'added by hand',
    );
    // A job like any other: costed, at the priority asked.
    expect(added?.data).toMatchObject({ priority: 5, cost: { outputTokens: 100 } });
  });
});
