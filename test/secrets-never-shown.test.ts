import { afterAll, describe, expect, it } from 'vitest';
import { hashApiKey } from '../producer/http/api-keys.ts';
import { openPool, type Pool, type Proc, runCli, startCli } from './fixtures/worker-harness.ts';
import { newRedis, until } from './helpers.ts';

const PROVIDER_KEY = 'sk-ant-api03-PROVIDER-SECRET-5150';
const TENANT_KEY = 'sk-tenant-acme-SECRET-8086';
const WRONG_KEY = 'sk-guessed-SECRET-1999';
const DASH_TOKEN = 'dash-token-SECRET-2112';
const SECRETS = [PROVIDER_KEY, TENANT_KEY, WRONG_KEY, DASH_TOKEN];

let pool: Pool | undefined;
const procs: Proc[] = [];
afterAll(async () => {
  await Promise.all(procs.map((p) => p.kill('SIGKILL')));
  await pool?.cleanup();
});

const firstLine = async (p: Proc) => {
  await until(() => p.stdout().includes('\n'), 120_000, 100);
  return p.stdout().split('\n')[0]!.trim();
};

describe('secrets', () => {
  it('never appear in logs, the dashboard, status --json, job data or dead letters', async () => {
    pool = await openPool('secrets', { latencyMs: 5 });
    const env = pool.cliEnv({
      ANTHROPIC_API_KEY: PROVIDER_KEY,
      LLMQ_API_KEYS: `acme:${hashApiKey(TENANT_KEY)}`,
      LLMQ_DASHBOARD_TOKEN: DASH_TOKEN,
    });
    const worker = startCli(['worker'], env);
    const serve = startCli(['serve', '--port', '0'], env);
    const dashboard = startCli(['dashboard', '--port', '0'], env);
    procs.push(worker, serve, dashboard);
    const api = await firstLine(serve);
    // The first line is the overview's URL.
    const dash = (await firstLine(dashboard)).replace(/\/(overview)?$/, '');

    const post = (key: string, model: string) =>
      fetch(`${api}/v1/jobs`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          request: { model, max_tokens: 30, messages: [{ role: 'user', content: 'Hi there.' }] },
          meta: { team: 'search' },
        }),
      });
    // Guesses, enough for the throttle to log the address.
    for (let i = 0; i < 6; i++) expect([401, 429]).toContain((await post(WRONG_KEY, 'x')).status);
    await until(() => serve.stderr().includes('failed authentications'), 10_000);
    // Wait out the refusal the guesses earned: the throttle is per address, and so is this test.
    const ok = await (async () => {
      for (;;) {
        const res = await post(TENANT_KEY, 'claude-haiku-4-5');
        if (res.status !== 429) return res;
        await new Promise((r) => setTimeout(r, Number(res.headers.get('retry-after')) * 1000));
      }
    })();
    expect(ok.status).toBe(202);
    const done = ((await ok.json()) as { id: string }).id;
    const dead = ((await (await post(TENANT_KEY, 'no-such-model')).json()) as { id: string }).id;
    const auth = { authorization: `Bearer ${TENANT_KEY}` };
    const waitFor = async (id: string) => {
      const res = await fetch(`${api}/v1/jobs/${id}/wait?timeout=30`, { headers: auth });
      return res.text();
    };
    const seen: string[] = [await waitFor(done), await waitFor(dead)];
    expect(seen[0]).toContain('"state":"completed"');
    expect(seen[1]).toContain('"state":"failed"');

    const bearer = { authorization: `Bearer ${DASH_TOKEN}` };
    const q = pool.names.queue;
    for (const path of [
      '/',
      '/overview',
      `/api/overview?queue=${q}`,
      `/api/usage?queue=${q}&kind=tenant&name=acme`,
      '/limiter',
      `/api/limiter?queue=${q}`,
      '/metrics',
      '/api/queues',
      `/api/queues?activeQueue=${q}&status=completed&page=1&jobsPerPage=10`,
      `/api/queues?activeQueue=${q}&status=failed&page=1&jobsPerPage=10`,
      `/api/queues?activeQueue=${q}-dead&status=waiting&page=1&jobsPerPage=10`,
    ]) {
      const res = await fetch(dash + path, { headers: bearer });
      expect(res.status, path).toBe(200);
      seen.push(await res.text());
    }
    const status = await runCli(['status', '--json'], env);
    expect(status.code).toBe(0);
    seen.push(status.stdout, status.stderr);
    const dlq = await runCli(['dlq', 'list', '--json'], env);
    seen.push(dlq.stdout, dlq.stderr);

    // Everything Redis holds under the test's prefix: job data, results, dead letters, limiter.
    const redis = newRedis();
    try {
      for (const key of await redis.keys(`${pool.names.prefix}:*`)) {
        const type = await redis.type(key);
        if (type === 'hash') seen.push(JSON.stringify(await redis.hgetall(key)));
        else if (type === 'string') seen.push((await redis.get(key)) ?? '');
        else if (type === 'list') seen.push(JSON.stringify(await redis.lrange(key, 0, -1)));
        else if (type === 'zset') seen.push(JSON.stringify(await redis.zrange(key, '0', '-1')));
        else if (type === 'set') seen.push(JSON.stringify(await redis.smembers(key)));
        else if (type === 'stream') seen.push(JSON.stringify(await redis.xrange(key, '-', '+')));
      }
    } finally {
      redis.disconnect();
    }
    expect(worker.child.exitCode).toBeNull();
    await Promise.all([worker, serve, dashboard].map((p) => p.kill('SIGTERM')));
    seen.push(...[worker, serve, dashboard].flatMap((p) => [p.stdout(), p.stderr()]));

    const all = seen.join('\n');
    expect(all).toContain('search'); // the job's data was read…
    expect(all).toContain('model: no-such-model'); // …and the provider's error
    for (const secret of SECRETS) expect(all, secret).not.toContain(secret);
  }, 300_000);
});
