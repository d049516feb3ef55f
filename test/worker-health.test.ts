/**
 * A worker's probes (`llmq worker --health-port`): /healthz says whether its gate loop turns,
 * and nothing else (a Redis outage must not restart every worker); /readyz whether Redis
 * answers, the fleet's limits are the worker's own and it is not draining; /metrics this
 * process's runtime and calls. Against real workers, the shared Redis, a private one to lose,
 * and the mock over HTTP.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { resolveConfig } from '../shared/config.ts';
import { fleetLimitsOf, writeFleetLimits } from '../shared/fleet-limits.ts';
import { connectRedis } from '../shared/redis.ts';
import { type HealthServer, startHealthServer } from '../worker/health-server.ts';
import type { WorkerHandle } from '../worker/worker-options.ts';
import { startAofRedis } from './fixtures/redis-servers.ts';
import { openPool, type Pool, request } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

let pool: Pool | undefined;
let probes: HealthServer | undefined;
const closers: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  await probes?.close();
  probes = undefined;
  await pool?.cleanup();
  pool = undefined;
  // What the pool ran on (a private Redis) goes last.
  for (const close of closers.splice(0).reverse()) await close().catch(() => {});
});

/** No limits of the worker's own: what a worker started without limit flags runs with. */
const NO_LIMITS = fleetLimitsOf(resolveConfig({ env: {} }));

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies and metrics text, read by tests
async function get(url: string): Promise<{ status: number; body: any }> {
  const res = await fetch(url);
  const text = await res.text();
  const json = res.headers.get('content-type')?.includes('json');
  return { status: res.status, body: json ? JSON.parse(text) : text };
}

function probesOf(p: Pool, worker: WorkerHandle, more: { stallMs?: number } = {}) {
  return startHealthServer({
    worker,
    redis: p.redis,
    names: p.names,
    limits: NO_LIMITS,
    port: 0,
    ...more,
  });
}

describe('the worker probes', () => {
  it('an idle worker is alive and ready; /metrics shows this process and its calls', async () => {
    pool = await openPool('health');
    const worker = await pool.worker({ concurrency: 3 });
    probes = await probesOf(pool, worker);
    expect(await get(`${probes.url}/healthz`)).toEqual({ status: 200, body: { status: 'ok' } });
    expect(await get(`${probes.url}/readyz`)).toEqual({ status: 200, body: { status: 'ready' } });
    await pool.producer.waitForResult(await pool.producer.enqueue(request('Hi.')), {
      timeout: 30_000,
    });
    await until(() => worker.inFlight() === 0, 10_000);
    const { status, body } = await get(`${probes.url}/metrics`);
    expect(status).toBe(200);
    const q = `queue="${pool.names.queue}"`;
    expect(body).toContain(`llmq_worker_calls_started_total{${q}} 1`);
    expect(body).toContain(`llmq_worker_calls_in_flight{${q}} 0`);
    expect(body).toContain(`llmq_worker_concurrency{${q}} 3`);
    expect(body).toMatch(new RegExp(`llmq_worker_gate_rounds_total\\{${q}\\} [1-9]`));
    // The runtime's own, for this process.
    expect(body).toMatch(/^process_resident_memory_bytes\{.*\} \d+/m);
    expect(body).toMatch(/^nodejs_eventloop_lag_seconds\{/m);
    expect((await get(`${probes.url}/nope`)).status).toBe(404);
  });

  it('a gate step longer than the bound fails /healthz; a worker whose slots are all busy is alive', async () => {
    pool = await openPool('health-stall', { latencyMs: 3_000 });
    // One slot, held by a 3-second call: waiting for a slot is not a stalled loop.
    const busy = await pool.worker({ concurrency: 1 });
    probes = await probesOf(pool, busy, { stallMs: 300 });
    await pool.producer.enqueue(request('A slow one.'));
    await until(() => busy.inFlight() === 1, 30_000);
    // Past the bound (a span of time, not a condition to await): the call is still running.
    await new Promise((r) => setTimeout(r, 600));
    expect(busy.inFlight()).toBe(1);
    expect((await get(`${probes.url}/healthz`)).status).toBe(200);
    await busy.stop(10_000);
    await probes.close();

    // A job waiting for budget keeps the gate in one step: past the bound, the probe says so.
    const waiting = await pool.worker({ limiter: { limits: { tokens: 200 }, windowMs: 60_000 } });
    probes = await probesOf(pool, waiting, { stallMs: 300 });
    await pool.producer.enqueue(request('First.', 100));
    await pool.producer.enqueue(request('Second, over the budget left.', 100));
    await until(async () => (await get(`${probes!.url}/healthz`)).status === 503, 30_000, 100);
    const failing = await get(`${probes.url}/healthz`);
    expect(failing.body.status).toBe('failing');
    expect(failing.body.reasons[0]).toMatch(
      /gate has been in one step for [\d.]+ (ms|s) \(the bound is 300 ms\): its loop does not turn/,
    );
  });

  it('/readyz fails while the fleet stores other limits than the worker runs with, and while it drains', async () => {
    pool = await openPool('health-ready', { latencyMs: 1_500 });
    const worker = await pool.worker();
    probes = await probesOf(pool, worker);
    const other = fleetLimitsOf(resolveConfig({ env: { LLMQ_TPM: '4000' } }));
    await writeFleetLimits(pool.redis, pool.names, other, 'llmq limits set (test)');
    const apart = await get(`${probes.url}/readyz`);
    expect(apart.status).toBe(503);
    expect(apart.body.reasons).toEqual([
      expect.stringMatching(
        /limits differ from the fleet's \(tpm none here, 4000 stored\): restart/,
      ),
    ]);
    await writeFleetLimits(pool.redis, pool.names, NO_LIMITS, 'llmq limits set (test)');
    expect((await get(`${probes.url}/readyz`)).status).toBe(200);

    // Draining: a call in flight finishes while the probe says not ready; liveness holds.
    const id = await pool.producer.enqueue(request('Finish me.'));
    await until(() => worker.inFlight() === 1, 30_000);
    const stopping = worker.stop(30_000);
    const draining = await get(`${probes.url}/readyz`);
    expect(draining.status).toBe(503);
    expect(draining.body.reasons).toEqual([expect.stringMatching(/^draining: /)]);
    expect((await get(`${probes.url}/healthz`)).status).toBe(200);
    await stopping;
    expect((await pool.job(id))!.returnvalue.message.stop_reason).toBe('end_turn');
  });

  it('Redis gone: /readyz says so within its bound, /healthz stays 200; ready again once it is back', async () => {
    const server = await startAofRedis();
    closers.push(() => server.stop());
    pool = await openPool('health-redis', {}, {}, { redisUrl: server.url });
    const redis = connectRedis(server.url);
    redis.on('error', () => {});
    closers.unshift(async () => redis.disconnect());
    const worker = await pool.worker({ redis });
    probes = await startHealthServer({
      worker,
      redis,
      names: pool.names,
      limits: NO_LIMITS,
      port: 0,
      redisTimeoutMs: 500,
    });
    expect((await get(`${probes.url}/readyz`)).status).toBe(200);
    await server.kill();
    const lost = await get(`${probes.url}/readyz`);
    expect(lost.status).toBe(503);
    expect(lost.body.reasons).toEqual([expect.stringMatching(/^Redis did not answer PING/)]);
    expect((await get(`${probes.url}/healthz`)).status).toBe(200);
    await server.restart();
    await until(async () => (await get(`${probes!.url}/readyz`)).status === 200, 30_000, 100);
    await worker.stop(5_000);
  });
});

describe('llmq worker --health-port', () => {
  it('serves the probes at the URL it logs, and refuses a bad port with one line, exit 2', async () => {
    pool = await openPool('health-cli');
    const cli = pool.startCli(['worker', '--health-port', '0'], pool.cliEnv());
    await until(() => /health probes at http:\/\/127\.0\.0\.1:\d+/.test(cli.stderr()), 60_000, 50);
    const url = /health probes at (http:\/\/127\.0\.0\.1:\d+)/.exec(cli.stderr())![1]!;
    expect(await get(`${url}/healthz`)).toEqual({ status: 200, body: { status: 'ok' } });
    expect(await get(`${url}/readyz`)).toEqual({ status: 200, body: { status: 'ready' } });
    expect(await cli.kill('SIGTERM')).toBe(0);
    await expect(fetch(`${url}/healthz`)).rejects.toThrow();

    const bad = pool.startCli(['worker', '--health-port', 'eighty'], pool.cliEnv());
    expect(await bad.exited()).toBe(2);
    expect(bad.stderr().trim().split('\n')).toEqual([
      'llmq: --health-port must be a whole number from 0 to 65535, got "eighty"',
    ]);
  });
});
