/**
 * `llmq serve` and the dashboard answer Kubernetes-style probes without credentials: /healthz
 * while the process serves, /readyz while Redis answers too; everything else still wants a key.
 * Redis is lost for real (a private server, killed and restarted from its AOF).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { type DashboardHandle, startDashboard } from '../dashboard/server.ts';
import { hashApiKey } from '../producer/http/api-keys.ts';
import { type HttpApi, startHttpApi } from '../producer/http/server.ts';
import { resolveConfig } from '../shared/config.ts';
import { type AofRedis, startAofRedis } from './fixtures/redis-servers.ts';
import { testNames, until } from './helpers.ts';

let server: AofRedis | undefined;
let api: HttpApi | undefined;
let dashboard: DashboardHandle | undefined;
afterEach(async () => {
  await api?.close();
  await dashboard?.close();
  await server?.stop();
  api = dashboard = server = undefined;
});

async function get(url: string, method = 'GET') {
  const res = await fetch(url, { method });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

/** A probe's answers across an outage: ready, then 503 naming Redis (alive all along), then ready. */
async function acrossAnOutage(base: string, redis: AofRedis) {
  expect(await get(`${base}/healthz`)).toEqual({ status: 200, body: { status: 'ok' } });
  expect(await get(`${base}/readyz`)).toEqual({ status: 200, body: { status: 'ready' } });
  expect((await get(`${base}/readyz`, 'HEAD')).status).toBe(200);
  await redis.kill();
  const lost = await get(`${base}/readyz`);
  expect(lost.status).toBe(503);
  expect(lost.body).toMatchObject({
    status: 'not ready',
    reasons: [expect.stringMatching(/^Redis did not answer PING/)],
  });
  expect((await get(`${base}/healthz`)).status).toBe(200);
  await redis.restart();
  await until(async () => (await get(`${base}/readyz`)).status === 200, 30_000, 100);
}

describe('probes of llmq serve and the dashboard', () => {
  it('llmq serve: open probes, alive through a Redis outage, ready only while Redis answers', async () => {
    server = await startAofRedis();
    const names = testNames('probes');
    const config = resolveConfig({
      flags: { queue: names.queue, prefix: names.prefix, redisUrl: server.url },
      env: {},
    });
    api = await startHttpApi({ config, apiKeys: `acme:${hashApiKey('sk-probes')}`, port: 0 });
    // The job API still wants its key.
    expect((await fetch(`${api.url}/v1/jobs/x`)).status).toBe(401);
    await acrossAnOutage(api.url, server);
  });

  it('the dashboard: open probes while every other page wants credentials', async () => {
    server = await startAofRedis();
    const names = testNames('probes-dash');
    dashboard = await startDashboard({
      redisUrl: server.url,
      prefix: names.prefix,
      port: 0,
      auth: { token: 'probe-test-token' },
    });
    for (const path of ['/', '/metrics', '/overview', '/healthz/x'])
      expect((await fetch(`${dashboard.baseUrl}${path}`)).status, path).toBe(401);
    await acrossAnOutage(dashboard.baseUrl, server);
  });
});
