/**
 * A pool from the config: `llmq worker` with `LLMQ_DEPLOYMENTS` calls each deployment through its
 * platform's SDK; `llmq enqueue` and `llmq serve`'s API refuse a pin the pool lacks, and a batch
 * job no deployment of the pool can take. No list: the one key, as before.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { hashApiKey } from '../producer/http/api-keys.ts';
import { type HttpApi, startHttpApi } from '../producer/http/server.ts';
import { resolveConfig } from '../shared/config.ts';
import type { MockAnthropicHandle } from '../testing/mock-anthropic/index.ts';
import { eachTestMocks } from './fixtures/mock-servers.ts';
import {
  allCompleted,
  completedEvents,
  openPool,
  type Pool,
  type Proc,
  request,
  runCli,
} from './fixtures/worker-harness.ts';
import { REDIS_URL, until } from './helpers.ts';

const SECRETS = {
  KEY_A: 'sk-ant-test-cli-pool-a-secret',
  AWS_KEY_ID: 'AKIDCLIPOOLTEST',
  AWS_SECRET: 'cli-pool-aws-secret-value',
};

let pool: Pool | undefined;
let api: HttpApi | undefined;
afterEach(async () => {
  await api?.close();
  api = undefined;
  await pool?.cleanup();
  pool = undefined;
});
const startMock = eachTestMocks();

/** A Claude API deployment on mock `a`, a Bedrock one on mock `b`, each with its limits. */
function deployments(a: MockAnthropicHandle, b: MockAnthropicHandle, tpm = [1_500, 3_000]) {
  return [
    {
      name: 'a',
      kind: 'anthropic',
      baseUrl: a.url,
      credentials: { apiKeyEnv: 'KEY_A' },
      limits: { tpm: tpm[0] },
    },
    {
      name: 'b',
      kind: 'bedrock',
      region: 'us-east-1',
      baseUrl: b.url,
      credentials: { awsAccessKeyEnv: 'AWS_KEY_ID', awsSecretKeyEnv: 'AWS_SECRET' },
      models: { 'claude-test-*': 'anthropic.claude-test-1-v1:0' },
      limits: { tpm: tpm[1] },
    },
  ];
}

/** The worker's JSON log lines whose message is `msg`. */
function logLines(stderr: string, msg: string): Record<string, unknown>[] {
  return stderr
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((l) => l['msg'] === msg);
}

/** Jobs waiting, by priority or not. */
const waiting = async (p: Pool) => {
  const c = await p.counts();
  return c.wait + c.prioritized;
};

/** Starts `llmq worker` on the pool's queue; resolves once it named its deployments. */
async function cliWorker(
  p: Pool,
  env: Record<string, string>,
  args: string[],
  ready = /limits \w+: /,
): Promise<Proc> {
  const w = p.startCli(['worker', ...args], p.cliEnv({ ...SECRETS, ...env }));
  await Promise.race([
    until(() => ready.test(w.stderr()), 60_000, 20),
    w.exited().then((code) => {
      throw new Error(`llmq worker exited (${code}) before it pulled: ${w.stderr()}`);
    }),
  ]);
  return w;
}

describe('a pool from the config', () => {
  it('llmq worker with LLMQ_DEPLOYMENTS completes jobs on both mocks, each once, no 429, no key shown', async () => {
    const windowMs = 2_000;
    const [ma, mb] = await Promise.all([
      startMock({ windowMs, limits: { tokens: 1_500 }, latencyMs: 20 }),
      startMock({ windowMs, limits: { tokens: 3_000 }, latencyMs: 20 }),
    ]);
    pool = await openPool('clipool');
    const list = JSON.stringify(deployments(ma, mb));
    const args = ['--concurrency', '8', '--window', '2'];
    const w = await cliWorker(pool, { LLMQ_DEPLOYMENTS: list }, args);
    const ids: string[] = [];
    for (let i = 0; i < 16; i++) ids.push(await pool.producer.enqueue(request(`Job ${i}.`, 200)));
    await allCompleted(pool, ids, 60_000);

    const where = await Promise.all(
      ids.map(async (id) => (await pool!.job(id))!.returnvalue.deployment),
    );
    expect(new Set(where)).toEqual(new Set(['a', 'b']));
    // Each mock answered the jobs recorded as its own, none with a 429; b through Bedrock's path.
    expect(ma.stats().responses).toEqual({ '200': where.filter((x) => x === 'a').length });
    expect(mb.stats().responses).toEqual({ '200': where.filter((x) => x === 'b').length });
    const b = ids.find((_, i) => where[i] === 'b')!;
    expect((await pool.job(b))!.returnvalue.message.model).toBe('anthropic.claude-test-1-v1:0');
    const events = await completedEvents(pool);
    for (const id of ids) expect(events.get(id)).toBe(1);
    for (const secret of Object.values(SECRETS)) expect(w.stderr()).not.toContain(secret);
    // The log names the pool at start, and each call's deployment.
    expect(logLines(w.stderr(), 'worker started')[0]!['deployments']).toEqual([
      'a (anthropic; tpm 1500)',
      'b (bedrock us-east-1; tpm 3000)',
    ]);
    // Each completion's line comes once its result is stored, just after the job completes.
    await until(() => logLines(w.stderr(), 'job completed').length === ids.length, 10_000);
    const logged = new Map(
      logLines(w.stderr(), 'job completed').map((l) => [l['job'], l['deployment']]),
    );
    expect(ids.map((id) => logged.get(id))).toEqual(where);
  });

  it("a failed call's line names the deployment it failed on", async () => {
    const [ma, mb] = await Promise.all([startMock({ faults: { overloaded: 1 } }), startMock()]);
    pool = await openPool('clipool-fail');
    const onlyA = JSON.stringify(deployments(ma, mb, [100_000, 100_000]).slice(0, 1));
    const w = await cliWorker(pool, { LLMQ_DEPLOYMENTS: onlyA }, ['--concurrency', '1']);
    const id = await pool.producer.enqueue(request('Overloaded, then retried.'));
    await until(() => logLines(w.stderr(), 'job retried').length > 0, 30_000);
    expect(logLines(w.stderr(), 'job retried')[0]).toMatchObject({
      job: id,
      deployment: 'a',
      reason: expect.stringMatching(/529/),
    });
  });

  it('llmq worker without a list calls the one key, as before a pool', async () => {
    pool = await openPool('clipool-one');
    await cliWorker(pool, {}, ['--concurrency', '2']);
    const id = await pool.producer.enqueue(request('Hi.'));
    await allCompleted(pool, [id], 30_000);
    expect((await pool.job(id))!.returnvalue.deployment).toBeUndefined();
    expect(pool.mock.stats().responses).toEqual({ '200': 1 });
  });

  it('llmq enqueue refuses a pin the pool lacks and a batch job none of it takes: one line, exit 2, nothing enqueued', async () => {
    const [ma, mb] = await Promise.all([startMock(), startMock()]);
    pool = await openPool('clipool-pin');
    const env = pool.cliEnv({ LLMQ_DEPLOYMENTS: JSON.stringify(deployments(ma, mb)) });
    const line = JSON.stringify(request('Hi.'));
    const unknown = await runCli(['enqueue', '--deployment', 'nowhere'], env, line);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr.trim().split('\n')).toEqual([
      'llmq: invalid request: deployment: names no deployment of the pool (got "nowhere"; the pool has a, b)',
    ]);
    const batch = await runCli(['enqueue', '--deployment', 'b', '--via', 'batches'], env, line);
    expect(batch.code).toBe(2);
    expect(batch.stderr.trim()).toBe(
      'llmq: invalid request: deployment: "b" takes no Message Batches (those that do: a): pin another, or send it via messages',
    );
    const pinned = await runCli(['enqueue', '--deployment', 'b'], env, line);
    expect(pinned.code, pinned.stderr).toBe(0);
    expect(await waiting(pool)).toBe(1);
    const [job] = await pool.queue.getJobs(['wait', 'prioritized']);
    expect(job!.data.deployment).toBe('b');
  });

  it("llmq serve's API answers 400 for a pin the pool lacks, and for a batch job when none of it takes batches", async () => {
    const [ma, mb] = await Promise.all([startMock(), startMock()]);
    pool = await openPool('clipool-http');
    const onlyBedrock = [deployments(ma, mb)[1]];
    const config = resolveConfig({
      flags: { queue: pool.names.queue, prefix: pool.names.prefix, redisUrl: REDIS_URL },
      env: { LLMQ_DEPLOYMENTS: JSON.stringify(onlyBedrock) },
    });
    const key = 'sk-clipool-http-key';
    api = await startHttpApi({ config, apiKeys: `acme:${hashApiKey(key)}`, port: 0 });
    const post = async (body: object) => {
      const res = await fetch(`${api!.url}/v1/jobs`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ request: request('Hi.'), ...body }),
      });
      return { status: res.status, body: (await res.json()) as { error: Record<string, string> } };
    };
    const unknown = await post({ deployment: 'nowhere' });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error).toMatchObject({ code: 'invalid_request', field: 'deployment' });
    expect(unknown.body.error['message']).toContain('the pool has b');
    const batch = await post({ via: 'batches' });
    expect(batch.status).toBe(400);
    expect(batch.body.error).toMatchObject({ code: 'invalid_request', field: 'via' });
    expect(batch.body.error['message']).toContain('takes Message Batches');
    const ok = await post({ deployment: 'b' });
    expect(ok.status).toBe(202);
    expect(await waiting(pool)).toBe(1);
  });
});
