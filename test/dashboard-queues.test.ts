import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  type DashboardHandle,
  type DashboardOptions,
  startDashboard,
} from '../dashboard/server.ts';
import { Producer } from '../producer/producer.ts';
import { bullPrefix, queueRegistryKey } from '../shared/keys.ts';
import { deleteKeysMatching } from '../shared/redis.ts';
import { runCli } from './fixtures/worker-harness.ts';
import { deleteKeys, newRedis, REDIS_URL, testNames } from './helpers.ts';

const request = (text: string) => ({
  model: 'claude-test',
  max_tokens: 20,
  messages: [{ role: 'user', content: text }],
});

let redis: Redis;
const prefix = testNames('dq').prefix;
const quiet = { prefix, queue: 'quiet' };
const busy = { prefix, queue: 'busy' };
const gone = { prefix, queue: 'gone' };
const open: DashboardHandle[] = [];

beforeAll(async () => {
  redis = newRedis();
  for (const [names, jobs] of [
    [quiet, 1],
    [busy, 3],
    [gone, 5],
  ] as const) {
    const p = new Producer({ redis, names });
    for (let i = 0; i < jobs; i++) await p.enqueue(request(`${names.queue} ${i}`));
    await p.close();
  }
  // Someone deleted the busiest queue's keys (obliterate, DEL): it stays in the registry.
  await deleteKeysMatching(redis, `${bullPrefix(gone)}:*`);
});
afterEach(async () => {
  await Promise.all(open.splice(0).map((d) => d.close()));
});
afterAll(async () => {
  await deleteKeys(redis, prefix);
  redis.disconnect();
});

async function start(options: Partial<DashboardOptions> = {}): Promise<DashboardHandle> {
  const d = await startDashboard({ redis, prefix, port: 0, auth: { token: 't' }, ...options });
  open.push(d);
  return d;
}
const bearer = { authorization: 'Bearer t' };

async function json(d: DashboardHandle, path: string, headers: Record<string, string> = bearer) {
  const res = await fetch(d.baseUrl + path, { headers });
  // biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by tests
  return { status: res.status, headers: res.headers, body: (await res.json()) as any };
}

describe('the queues the dashboard and llmq queues show', () => {
  it('lists the queues that exist, not one whose keys are gone', async () => {
    const d = await start();
    const board = await json(d, '/api/queues');
    const shown = (board.body.queues as { name: string }[]).map((q) => q.name).sort();
    expect(shown).toEqual(['busy', 'busy-dead', 'quiet', 'quiet-dead']);
    expect((await json(d, '/api/limiter')).body.queues).toEqual(['busy', 'quiet']);
    // Listing wrote nothing: the gone queue is still registered, for `queues forget`.
    expect(await redis.sismember(queueRegistryKey(prefix), 'gone')).toBe(1);
  });

  it('opens the limiter page on LLMQ_QUEUE, else on the busiest queue', async () => {
    expect((await json(await start(), '/api/limiter')).body.view.queue).toBe('busy');
    expect((await json(await start({ queue: 'quiet' }), '/api/limiter')).body.view.queue).toBe(
      'quiet',
    );
    // A queue that is not there falls back to the busiest.
    expect((await json(await start({ queue: 'gone' }), '/api/limiter')).body.view.queue).toBe(
      'busy',
    );
  });

  it('llmq queues prints the counts; queues forget removes an empty queue only', async () => {
    const env = { ...process.env, REDIS_URL, LLMQ_PREFIX: prefix };
    const list = await runCli(['queues'], env);
    expect(list.code).toBe(0);
    const lines = list.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^queue\s+waiting\s+active\s+delayed\s+completed\s+failed\s+dead$/);
    expect(lines[1]).toMatch(/^busy\s+3\s+0\s+0\s+0\s+0\s+0$/);
    expect(lines[2]).toMatch(/^quiet\s+1\s+0\s+0\s+0\s+0\s+0$/);
    expect(lines[3]).toBe(
      'registered but with no keys left: gone (llmq queues forget NAME removes one)',
    );

    const refused = await runCli(['queues', 'forget', 'busy'], env);
    expect(refused.code).toBe(1);
    expect(refused.stderr.trim()).toBe(
      'llmq: queue busy is not empty (waiting 3): let it drain, purge its dead letters (llmq dlq purge) or clean it in the dashboard first',
    );
    expect(await redis.sismember(queueRegistryKey(prefix), 'busy')).toBe(1);

    const forgot = await runCli(['queues', 'forget', 'gone'], env);
    expect(forgot.code).toBe(0);
    expect(await redis.smembers(queueRegistryKey(prefix))).not.toContain('gone');

    const unknown = await runCli(['queues', 'forget', 'nope', '--prefix', prefix], env);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain(`no queue "nope" under prefix ${prefix} (known: busy, quiet)`);
  }, 180_000);
});

describe('dashboard sessions and guessing', () => {
  it("refuses another dashboard's session cookie, and an old one after a restart", async () => {
    const a = await start({ auth: {} });
    const b = await start({ auth: {} });
    const cookieOf = async (d: DashboardHandle) => {
      const login = await fetch(d.url, { redirect: 'manual' });
      return login.headers.get('set-cookie')!.split(';')[0]!;
    };
    const [aCookie, bCookie] = [await cookieOf(a), await cookieOf(b)];
    expect((await fetch(`${a.baseUrl}/api/limiter`, { headers: { cookie: aCookie } })).status).toBe(
      200,
    );
    // b's session under a's cookie name, and both cookies at once at a's door.
    const bValue = bCookie.split('=')[1]!;
    const aName = aCookie.split('=')[0]!;
    for (const cookie of [`${aName}=${bValue}`, bCookie]) {
      expect((await fetch(`${a.baseUrl}/api/limiter`, { headers: { cookie } })).status).toBe(401);
    }
    // A dashboard started again on the same port makes a new session: the old cookie is dead.
    const port = Number(new URL(a.baseUrl).port);
    await a.close();
    const again = await start({ auth: {}, port });
    expect(
      (await fetch(`${again.baseUrl}/api/limiter`, { headers: { cookie: aCookie } })).status,
    ).toBe(401);
  });

  it('slows an address that keeps guessing, and logs it without the guess', async () => {
    const lines: string[] = [];
    const d = await start({
      auth: { user: 'ops', password: 'right-password' },
      authThrottle: { freeFailures: 2, baseDelayMs: 60_000, log: (l) => lines.push(l) },
    });
    const basic = (p: string) => ({
      authorization: `Basic ${Buffer.from(`ops:${p}`).toString('base64')}`,
    });
    const statuses: number[] = [];
    for (const guess of ['guess-one', 'guess-two', 'guess-three', 'guess-four']) {
      statuses.push((await fetch(`${d.baseUrl}/api/limiter`, { headers: basic(guess) })).status);
    }
    // Two free failures; the third starts a refusal, which the fourth meets.
    expect(statuses).toEqual([401, 401, 401, 429]);
    const right = await json(d, '/api/limiter', basic('right-password'));
    expect(right.status).toBe(429);
    expect(right.body.error.code).toBe('TOO_MANY_AUTH_FAILURES');
    expect(Number(right.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(lines.join('\n')).toContain('127.0.0.1');
    expect(lines.join('\n')).not.toMatch(/guess-|right-password/);
  });
});
