/**
 * Where the jobs went: each deployment's calls by outcome, counted by the workers, in
 * `/metrics`, `llmq status` and the limiter page's JSON; they add up to the jobs each result
 * names and to what each deployment's server answered; never a key.
 */
import { describe, expect, it } from 'vitest';
import { startDashboard } from '../dashboard/server.ts';
import { deploymentField, readMetrics } from '../shared/metrics.ts';
import { eachTestMocks } from './fixtures/mock-servers.ts';
import { onMock } from './fixtures/pool-mocks.ts';
import { allCompleted, poolsPerTest, request, runCli } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const openTestPool = poolsPerTest();
const startMock = eachTestMocks();

describe("a pool's calls per deployment", () => {
  it('counts each deployment’s calls by outcome: they add up to the jobs that went there', async () => {
    const windowMs = 2_000;
    const [ma, mb] = await Promise.all([
      startMock({ windowMs, limits: { tokens: 1_500 }, latencyMs: 20 }),
      // b answers some calls with a 529, its first one whatever the routing (seed 7 draws
      // 0.01 first): its own counters show them.
      startMock({
        windowMs,
        limits: { tokens: 3_000 },
        latencyMs: 20,
        faults: { overloaded: 0.2 },
        seed: 7,
      }),
    ]);
    const pool = await openTestPool('poolcount');
    const a = onMock(ma, { name: 'a', limits: { tpm: 1_500 } });
    const b = onMock(mb, { name: 'b', limits: { tpm: 3_000 } });
    await pool.worker({
      concurrency: 8,
      deployments: [a, b],
      limiter: { windowMs },
      backoff: { baseMs: 20, capMs: 100 },
      breaker: { threshold: 100, cooldownMs: 100 },
    });
    const ids: string[] = [];
    for (let i = 0; i < 16; i++) ids.push(await pool.producer.enqueue(request(`Job ${i}.`, 200)));
    await allCompleted(pool, ids, 30_000);
    const where = await Promise.all(
      ids.map(async (id) => (await pool!.job(id))!.returnvalue.deployment),
    );
    const done = (d: string) => where.filter((w) => w === d).length;
    expect(done('a') + done('b')).toBe(16);
    expect(done('a')).toBeGreaterThan(0);
    const answered = (m: typeof ma, status: string) => m.stats().responses[status] ?? 0;
    const b529 = answered(mb, '529');
    expect(b529).toBeGreaterThan(0);
    // A successful call's counters are written within the writer's flush interval.
    const calls = () => readMetrics(pool!.redis, pool!.names);
    await until(async () => {
      const m = await calls();
      return (
        (m[deploymentField('a', 'calls')] ?? 0) + (m[deploymentField('b', 'calls')] ?? 0) ===
        16 + b529
      );
    });

    const TOKEN = 'pool-counters-token';
    const dashboard = await startDashboard({
      redis: pool.redis,
      prefix: pool.names.prefix,
      port: 0,
      auth: { token: TOKEN },
    });
    const get = (path: string) =>
      fetch(`${dashboard.baseUrl}${path}`, { headers: { authorization: `Bearer ${TOKEN}` } });
    try {
      const text = await (await get('/metrics')).text();
      const q = `queue="${pool.names.queue}"`;
      const series = (d: string, outcome: string) =>
        `llmq_deployment_calls_total{${q},deployment="${d}",outcome="${outcome}"}`;
      expect(text).toContain(`${series('a', 'ok')} ${done('a')}`);
      expect(text).toContain(`${series('b', 'ok')} ${done('b')}`);
      expect(text).toContain(`${series('b', '5xx')} ${b529}`);
      expect(text).toContain(`${series('a', '5xx')} 0`);
      expect(text).toContain(`${series('a', '429')} 0`);

      const body = (await (await get(`/api/limiter?queue=${pool.names.queue}`)).json()) as {
        view: { deployments: { name: string; calls: Record<string, number> }[] };
      };
      const byName = Object.fromEntries(body.view.deployments.map((d) => [d.name, d.calls]));
      expect(byName['a']).toEqual({
        calls: done('a'),
        ok: done('a'),
        '429': 0,
        '5xx': 0,
        '4xx': 0,
        connection_error: 0,
      });
      expect(byName['b']).toMatchObject({ calls: done('b') + b529, ok: done('b'), '5xx': b529 });
      for (const secret of [a.key, b.key])
        expect(text + JSON.stringify(body)).not.toContain(secret);
    } finally {
      await dashboard.close();
    }

    const status = await runCli(['status'], pool.cliEnv());
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toMatch(
      new RegExp(`^ {4}a\\b.*  calls ${done('a')} \\(${done('a')} ok\\)$`, 'm'),
    );
    expect(status.stdout).toMatch(
      new RegExp(`^ {4}b\\b.*  calls ${done('b') + b529} \\(${done('b')} ok, ${b529} 5xx\\)$`, 'm'),
    );
    for (const secret of [a.key, b.key]) expect(status.stdout).not.toContain(secret);
  });
});
