import { get } from 'node:http';
import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { dashboardAuthFromEnv } from '../dashboard/auth.ts';
import { resolveDashboardOptions } from '../dashboard/options.ts';
import {
  type DashboardHandle,
  type DashboardOptions,
  startDashboard,
} from '../dashboard/server.ts';
import { Producer } from '../producer/producer.ts';
import { llmqKey } from '../shared/keys.ts';
import { Limiter } from '../shared/limiter/limiter.ts';
import {
  start as begin,
  deleteKeys,
  newRedis,
  REDIS_URL,
  rateHeaders,
  testNames,
  until,
} from './helpers.ts';

const request = (text: string) => ({
  model: 'claude-sonnet-4-5',
  max_tokens: 50,
  messages: [{ role: 'user', content: text }],
});

let redis: Redis;
let names: ReturnType<typeof testNames>;
let producer: Producer;
const open: DashboardHandle[] = [];

beforeAll(async () => {
  redis = newRedis();
  names = testNames('dacc');
  producer = new Producer({ redis, names });
  await producer.enqueue(request('first'), {
    meta: { api_key: 'sk-tenant-secret-1234', team: 'search' },
  });
});
afterEach(async () => {
  await Promise.all(open.splice(0).map((d) => d.close()));
});
afterAll(async () => {
  await producer?.close();
  if (redis) {
    await deleteKeys(redis, names.prefix);
    redis.disconnect();
  }
});

async function start(options: Partial<DashboardOptions> = {}): Promise<DashboardHandle> {
  const d = await startDashboard({ redis, prefix: names.prefix, port: 0, ...options });
  open.push(d);
  return d;
}

const html = { accept: 'text/html,application/xhtml+xml' };

/** The Location of a GET sent with its path exactly as written (fetch would normalize it). */
function rawLocation(url: string): Promise<string | undefined> {
  const { host, port } = new URL(url);
  const path = url.slice(url.indexOf('/', 'http://'.length));
  return new Promise((resolve, reject) => {
    get({ host: host.split(':')[0], port, path, headers: html }, (res) => {
      res.resume();
      resolve(res.headers.location);
    }).on('error', reject);
  });
}

describe('dashboard access', () => {
  it('with nothing configured, makes a one-time token, prints it in the URL, and refuses everyone else', async () => {
    // This one opens (and closes) its own connection from the URL.
    const d = await start({ redis: undefined, redisUrl: REDIS_URL });
    expect(d.token).toMatch(/^[\w-]{32}$/);
    // It opens on the overview.
    expect(d.url).toBe(`${d.baseUrl}/overview?token=${d.token}`);
    expect(d.baseUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);

    for (const path of [
      '/',
      '/overview',
      '/tenant?name=acme',
      '/model?name=m',
      '/limiter',
      '/api/limiter',
      '/api/overview',
      '/api/usage?kind=tenant&name=acme',
      '/api/queues',
      '/metrics',
      '/static/images/logo.svg',
    ]) {
      const res = await fetch(d.baseUrl + path);
      expect(res.status, path).toBe(401);
    }
    const page = await fetch(`${d.baseUrl}/`, { headers: html });
    expect(page.status).toBe(401);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    expect(await page.text()).toContain('needs credentials');
    const json = await fetch(`${d.baseUrl}/api/limiter`);
    expect(await json.json()).toMatchObject({ error: { code: 'UNAUTHORIZED' } });
  });

  it('trades ?token= for an HttpOnly session cookie that carries on without the token', async () => {
    const d = await start();
    const login = await fetch(d.url, { headers: html, redirect: 'manual' });
    expect(login.status).toBe(303);
    expect(login.headers.get('location')).toBe('/overview');
    const setCookie = login.headers.get('set-cookie')!;
    expect(setCookie).toMatch(/HttpOnly/);
    expect(setCookie).toMatch(/SameSite=Strict/);
    expect(setCookie).not.toContain(d.token!);
    const cookie = setCookie.split(';')[0]!;
    const board = await fetch(`${d.baseUrl}/api/queues`, { headers: { cookie } });
    expect(board.status).toBe(200);
    // A cookie made up by someone else, or another dashboard's, is not a session.
    const forged = await fetch(`${d.baseUrl}/api/queues`, {
      headers: { cookie: `${cookie.split('=')[0]}=forged` },
    });
    expect(forged.status).toBe(401);
    const other = await start();
    const otherLogin = await fetch(other.url, { headers: html, redirect: 'manual' });
    const otherCookie = otherLogin.headers.get('set-cookie')!.split(';')[0]!;
    expect(
      (await fetch(`${other.baseUrl}/api/queues`, { headers: { cookie: otherCookie } })).status,
    ).toBe(200);
    expect(
      (await fetch(`${d.baseUrl}/api/queues`, { headers: { cookie: otherCookie } })).status,
    ).toBe(401);
    // However the path is spelled, the redirect stays on this host.
    for (const path of ['/.//example.com/', '//example.com/', '/%2F/example.com/']) {
      const location = await rawLocation(`${d.baseUrl}${path}?token=${d.token}`);
      expect(location, path).toMatch(/^\/(?!\/)/);
    }
    const wrong = await fetch(`${d.baseUrl}/?token=wrong`, { headers: html, redirect: 'manual' });
    expect(wrong.status).toBe(401);
  });

  it('takes Basic auth from the environment, and then no token at all', async () => {
    const auth = dashboardAuthFromEnv({
      LLMQ_DASHBOARD_USER: 'ops',
      LLMQ_DASHBOARD_PASSWORD: 'correct horse',
    });
    const d = await start({ auth });
    expect(d.token).toBeUndefined();
    expect(d.url).toBe(`${d.baseUrl}/overview`);
    const basic = (user: string, password: string) => ({
      authorization: `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`,
    });
    const none = await fetch(`${d.baseUrl}/`, { headers: html });
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toMatch(/^Basic realm="llmq dashboard"/);
    expect(
      (await fetch(`${d.baseUrl}/metrics`, { headers: basic('ops', 'correct horse') })).status,
    ).toBe(200);
    expect((await fetch(`${d.baseUrl}/metrics`, { headers: basic('ops', 'wrong') })).status).toBe(
      401,
    );
    expect(
      (await fetch(`${d.baseUrl}/metrics`, { headers: basic('admin', 'correct horse') })).status,
    ).toBe(401);
    expect((await fetch(`${d.baseUrl}/?token=anything`)).status).toBe(401);
  });

  it('refuses half a Basic auth setting with a message naming what is missing', () => {
    expect(() => dashboardAuthFromEnv({ LLMQ_DASHBOARD_USER: 'ops' })).toThrow(
      /LLMQ_DASHBOARD_PASSWORD is not set/,
    );
    expect(dashboardAuthFromEnv({ LLMQ_DASHBOARD_TOKEN: 't0ken' })).toEqual({
      user: undefined,
      password: undefined,
      token: 't0ken',
    });
  });

  it('resolves the command line: 127.0.0.1 by default, flags over env, bad ports named', () => {
    const base = resolveDashboardOptions({ env: {} });
    expect(base).toMatchObject({
      host: '127.0.0.1',
      port: 3000,
      readOnly: false,
      prefix: 'llmq',
      maxDepth: 10_000,
    });
    const fromEnv = resolveDashboardOptions({
      flags: { port: '8080' },
      env: {
        LLMQ_DASHBOARD_PORT: '9000',
        LLMQ_DASHBOARD_READ_ONLY: '1',
        LLMQ_PREFIX: 'p1',
        LLMQ_MAX_DEPTH: '50',
      },
    });
    expect(fromEnv).toMatchObject({ port: 8080, readOnly: true, prefix: 'p1', maxDepth: 50 });
    expect(() => resolveDashboardOptions({ flags: { port: 'abc' }, env: {} })).toThrow(
      '--port must be a whole number from 0 to 65535, got "abc"',
    );
    expect(() => resolveDashboardOptions({ env: { LLMQ_DASHBOARD_PORT: '70000' } })).toThrow(
      /LLMQ_DASHBOARD_PORT/,
    );
  });

  it('never shows a secret: not the token, the password, a tenant key in job data, nor ANTHROPIC_API_KEY', async () => {
    const apiKey = 'sk-ant-api-secret-for-the-test';
    const saved = process.env['ANTHROPIC_API_KEY'];
    process.env['ANTHROPIC_API_KEY'] = apiKey;
    try {
      const d = await start({
        auth: { user: 'ops', password: 'pa55-word-secret', token: 'bearer-secret-token' },
      });
      const headers = { authorization: 'Bearer bearer-secret-token' };
      const bodies: string[] = [];
      for (const path of [
        '/',
        '/limiter',
        '/api/limiter',
        '/metrics',
        '/api/queues',
        `/api/queues?activeQueue=${names.queue}&status=prioritized&page=1&jobsPerPage=10`,
      ]) {
        const res = await fetch(d.baseUrl + path, { headers });
        expect(res.status, path).toBe(200);
        bodies.push(await res.text());
      }
      const all = bodies.join('\n');
      expect(all).toContain('search'); // the job's data is there…
      expect(all).toContain('[redacted]'); // …with its key blanked
      for (const secret of [
        'sk-tenant-secret-1234',
        'pa55-word-secret',
        'bearer-secret-token',
        apiKey,
      ]) {
        expect(all).not.toContain(secret);
      }
    } finally {
      if (saved === undefined) delete process.env['ANTHROPIC_API_KEY'];
      else process.env['ANTHROPIC_API_KEY'] = saved;
    }
  });

  it('read-only hides the actions in Bull Board and refuses them', async () => {
    const ro = await start({ auth: { token: 't' }, readOnly: true });
    const headers = { authorization: 'Bearer t' };
    const list = (await (await fetch(`${ro.baseUrl}/api/queues`, { headers })).json()) as {
      queues: { name: string; readOnlyMode: boolean; allowRetries: boolean }[];
    };
    expect(list.queues.map((q) => q.name)).toEqual([names.queue, `${names.queue}-dead`]);
    expect(list.queues.every((q) => q.readOnlyMode && !q.allowRetries)).toBe(true);
    const refused = await fetch(`${ro.baseUrl}/api/queues/${names.queue}/promote`, {
      method: 'PUT',
      headers,
    });
    expect(refused.status).toBe(403);
    expect(await refused.json()).toMatchObject({ error: { code: 'READ_ONLY' } });

    const rw = await start({ auth: { token: 't' } });
    const allowed = await fetch(`${rw.baseUrl}/api/queues/${names.queue}/promote`, {
      method: 'PUT',
      headers,
    });
    expect(allowed.status).toBeLessThan(300);
  });

  it('shows a queue that appears after the start, and says which queue it does not know', async () => {
    const d = await start({ auth: { token: 't' } });
    const headers = { authorization: 'Bearer t' };
    const later = { prefix: names.prefix, queue: `${names.queue}-later` };
    const second = new Producer({ redis, names: later });
    try {
      await second.enqueue(request('late'));
      await until(
        async () => {
          const body = (await (await fetch(`${d.baseUrl}/api/queues`, { headers })).json()) as {
            queues: { name: string }[];
          };
          return body.queues.some((q) => q.name === later.queue);
        },
        5_000,
        200,
      );
      const res = await fetch(`${d.baseUrl}/api/limiter?queue=${later.queue}`, { headers });
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({
        view: { queue: later.queue, depth: { waiting: 1 } },
      });
      const unknown = await fetch(`${d.baseUrl}/api/limiter?queue=nope`, { headers });
      expect(unknown.status).toBe(404);
      expect(await unknown.json()).toMatchObject({ error: { code: 'QUEUE_NOT_FOUND' } });
    } finally {
      await second.close();
    }
  });

  it('reports the breaker and the shared pause the workers wrote', async () => {
    const d = await start({ auth: { token: 't' } });
    await redis.hset(llmqKey(names, 'breaker'), {
      state: 'half_open',
      failures: '3',
      open_until: '0',
    });
    const res = await fetch(`${d.baseUrl}/api/limiter?queue=${names.queue}`, {
      headers: { authorization: 'Bearer t' },
    });
    const { view } = (await res.json()) as {
      view: { breaker: { state: string; failures: number }; pause: { until: null } };
    };
    expect(view.breaker).toMatchObject({ state: 'half_open', failures: 3 });
    expect(view.pause.until).toBeNull();
    await redis.del(llmqKey(names, 'breaker'));
  });

  it("reports the provider's view the workers admit by", async () => {
    const d = await start({ auth: { token: 't' } });
    const limiter = new Limiter({ redis, names, limits: { tokens: 4_000 }, headroom: 0 });
    try {
      const r = await limiter.acquire({ requests: 1, inputTokens: 100, outputTokens: 100 });
      // Another client spent about 1,000 beside our 200 (a figure that is not round: the
      // provider's rounding is learned from its figures).
      await begin(limiter, r, rateHeaders('tokens', 4_000, 2_793, 60_000));
      const res = await fetch(`${d.baseUrl}/api/limiter?queue=${names.queue}`, {
        headers: { authorization: 'Bearer t' },
      });
      const { view } = (await res.json()) as {
        view: {
          scopes: {
            scope: string;
            shape: string;
            dimensions: { tokens: { used: number; providerLimit: number; providerRoom: number } };
          }[];
        };
      };
      const global = view.scopes.find((s) => s.scope === 'global')!;
      expect(global.shape).toBe('window');
      expect(global.dimensions.tokens).toMatchObject({ used: 200, providerLimit: 4_000 });
      expect(global.dimensions.tokens.providerRoom).toBe(2_793);
    } finally {
      await limiter.destroy();
    }
  });
});
