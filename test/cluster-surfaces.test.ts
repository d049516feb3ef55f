/**
 * What people look at and call on a Redis Cluster: `llmq serve` (the jobs API and the Messages
 * gateway through the real SDK), `llmq dashboard` (Bull Board's API, the limiter's JSON and
 * /metrics) and the CLI's `status`, `dlq list` and `queues`. Three queues on three masters of
 * one 3-master, 3-replica cluster, started once for the file.
 */
import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashApiKey } from '../producer/http/api-keys.ts';
import type { QueueStatus } from '../shared/status.ts';
import type { DeadLetterSummary } from '../worker/dead-letters.ts';
import {
  CLUSTER_START_MS,
  onPort,
  startCluster,
  type TestCluster,
} from './fixtures/redis-servers.ts';
import {
  allCompleted,
  openPool,
  type Pool,
  type Proc,
  request,
  runCli,
  startCli,
} from './fixtures/worker-harness.ts';
import { testNames, until } from './helpers.ts';

let cluster: TestCluster;
const prefix = testNames('cl-surf').prefix;
/** `served` runs jobs through `llmq serve`; `dying` dead-letters; `idle` has no worker. */
let served: Pool;
let dying: Pool;
let idle: Pool;
/** A `redis+cluster://` URL whose one seed is a replica: the clients find the masters themselves. */
let oneSeed: string;
const procs: Proc[] = [];

const TENANT_KEY = 'sk-llmq-cluster-tenant-0123456789';
const DASHBOARD_TOKEN = 'cluster-dashboard-token';
/** A long window, so what the served queue spent is still in it when the dashboard reads it. */
const SERVED_LIMITS = { windowMs: 300_000, limits: { tokens: 100_000 } };

beforeAll(async () => {
  cluster = await startCluster(3);
  // Three queue names whose hash tags land on three different masters, under one prefix.
  const byMaster = new Map<number, string>();
  while (byMaster.size < 3) {
    const { queue } = testNames();
    byMaster.set(await cluster.masterOfSlot(await cluster.keySlot(`{${queue}}`)), queue);
  }
  const [a, b, c] = [...byMaster.values()] as [string, string, string];
  const on = (queue: string) => ({ redisUrl: cluster.url, names: { prefix, queue } });
  for (const n of cluster.nodes) {
    if ((await onPort(n.port, (r) => r.role()))[0] === 'slave') {
      oneSeed = `redis+cluster://127.0.0.1:${n.port}`;
      break;
    }
  }
  served = await openPool('cl-surf', {}, {}, on(a));
  dying = await openPool('cl-surf', { faults: { overloaded: 1 } }, {}, on(b));
  idle = await openPool('cl-surf', {}, {}, on(c));
}, CLUSTER_START_MS);

afterAll(async () => {
  await Promise.all(procs.map((p) => p.kill('SIGKILL')));
  // The pools share a prefix: the first cleanup deletes every key of the three.
  for (const pool of [served, dying, idle]) await pool?.cleanup();
  await cluster?.stop();
});

/** Starts a long-running `llmq` command and resolves with the first line it prints (its URL). */
async function urlOf(args: string[], env: NodeJS.ProcessEnv): Promise<string> {
  const proc = startCli(args, env);
  procs.push(proc);
  await Promise.race([
    until(() => proc.stdout().includes('\n'), 60_000, 50),
    proc.exited().then((code) => {
      throw new Error(`llmq ${args[0]} exited (${code}): ${proc.stderr()}`);
    }),
  ]);
  return proc
    .stdout()
    .split('\n')[0]!
    .replace(/\/(\?.*)?$/, '');
}

/** `name{labels} value` samples of Prometheus text, keyed by name and sorted labels. */
function samples(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = /^(\w+)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) continue;
    const labels = (m[2] ?? '')
      .split(/,(?=\w+=")/)
      .filter(Boolean)
      .sort()
      .join(',');
    out.set(`${m[1]}{${labels}}`, Number(m[3]));
  }
  return out;
}
const sample = (s: Map<string, number>, name: string, labels: string[]) =>
  s.get(`${name}{${[...labels].sort().join(',')}}`);

describe('llmq on a 3-master, 3-replica Redis Cluster: what people call and look at', () => {
  it('`llmq serve` over redis+cluster:// takes jobs over HTTP and answers the SDK’s Messages calls', async () => {
    const url = await urlOf(
      ['serve', '--port', '0'],
      served.cliEnv({ LLMQ_API_KEYS: `acme:${hashApiKey(TENANT_KEY)}`, REDIS_URL: oneSeed }),
    );
    await served.worker({ limiter: SERVED_LIMITS, concurrency: 4 });
    const auth = { authorization: `Bearer ${TENANT_KEY}` };

    const created = await fetch(`${url}/v1/jobs`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ request: request('Hello, cluster.', 30) }),
    });
    expect(created.status).toBe(202);
    const { id } = (await created.json()) as { id: string };
    const waited = await fetch(`${url}/v1/jobs/${id}/wait?timeout=30`, { headers: auth });
    expect(waited.status).toBe(200);
    const view = (await waited.json()) as {
      state: string;
      result: { message: Anthropic.Message };
    };
    expect(view.state).toBe('completed');
    const stored = await served.job(id);
    expect(view.result.message.content).toEqual(stored?.returnvalue.message.content);
    expect(stored?.data.tenant).toBe('acme');
    const got = await fetch(`${url}/v1/jobs/${id}`, { headers: auth });
    expect(((await got.json()) as { state: string }).state).toBe('completed');

    // The gateway: the SDK pointed at llmq serve, its call run by the worker on the cluster.
    const sdk = new Anthropic({ apiKey: TENANT_KEY, baseURL: url, maxRetries: 0 });
    const { data, response } = await sdk.messages
      .create(
        request('Answer through the gateway.', 40) as Anthropic.MessageCreateParamsNonStreaming,
      )
      .withResponse();
    const jobId = response.headers.get('llmq-job-id')!;
    expect(data).toMatchObject({ type: 'message', role: 'assistant' });
    expect((await served.job(jobId))?.returnvalue.message.content).toEqual(data.content);

    // A stream relayed from the worker through a Redis stream on the queue's master.
    const stream = sdk.messages.stream(
      request('Stream across the cluster.', 60) as Anthropic.MessageCreateParamsNonStreaming,
    );
    const { response: streamed } = await stream.withResponse();
    const final = await stream.finalMessage();
    const streamJob = streamed.headers.get('llmq-job-id')!;
    await allCompleted(served, [streamJob]);
    expect(final.content).toEqual((await served.job(streamJob))?.returnvalue.message.content);

    expect(served.mock.stats().admitted).toBe(3);
    expect(await served.counts()).toMatchObject({ completed: 3, active: 0, failed: 0 });
  }, 180_000);

  it('`llmq dlq list`, `llmq status --json` and `llmq queues` read the queues on every master', async () => {
    await dying.worker({
      backoff: { baseMs: 20, capMs: 50 },
      breaker: { threshold: 1_000 },
      limiter: { windowMs: 5_000, limits: { tokens: 50_000 } },
    });
    const ids = [
      await dying.producer.enqueue(request('Fail once.'), { attempts: 1, retryForMs: 0 }),
      await dying.producer.enqueue(request('Fail twice.'), { attempts: 1, retryForMs: 0 }),
    ];
    await until(async () => (await dying.deadLetters()).length === 2, 30_000);
    for (let i = 0; i < 3; i++) await idle.producer.enqueue(request(`Wait ${i}.`));

    const list = await runCli(['dlq', 'list', '--json'], dying.cliEnv());
    expect(list.code, list.stderr).toBe(0);
    const letters = JSON.parse(list.stdout) as DeadLetterSummary[];
    expect(letters.map((l) => l.id).sort()).toEqual([...ids].sort());
    for (const l of letters)
      expect(l).toMatchObject({ errorClass: 'OverloadedError', status: 529 });

    const status = await runCli(['status', '--json'], dying.cliEnv({ REDIS_URL: oneSeed }));
    expect(status.code, status.stderr).toBe(0);
    const s = JSON.parse(status.stdout) as QueueStatus;
    expect(s.counts).toMatchObject({ dead: 2, failed: 0, waiting: 0, active: 0 });
    // The window and limits the queue's worker published, read on its master.
    expect(s.limiter.windowMs).toBe(5_000);
    const global = s.limiter.scopes.find((x) => x.scope === 'global');
    expect(global?.dimensions.tokens.limit).toBe(50_000);

    const idleStatus = await runCli(['status', '--json'], idle.cliEnv());
    expect(idleStatus.code, idleStatus.stderr).toBe(0);
    expect((JSON.parse(idleStatus.stdout) as QueueStatus).counts).toMatchObject({
      waiting: 3,
      completed: 0,
    });

    const queues = await runCli(['queues'], idle.cliEnv());
    expect(queues.code, queues.stderr).toBe(0);
    const rows = queues.stdout.trim().split('\n').slice(1);
    const row = (pool: Pool) => rows.find((r) => r.startsWith(`${pool.names.queue} `));
    expect(row(served)).toMatch(/^\S+\s+0\s+0\s+0\s+3\s+0\s+0$/);
    expect(row(dying)).toMatch(/^\S+\s+0\s+0\s+0\s+0\s+0\s+2$/);
    expect(row(idle)).toMatch(/^\S+\s+3\s+0\s+0\s+0\s+0\s+0$/);
  }, 180_000);

  it('`llmq dashboard`: Bull Board lists every queue with its counts, the limiter JSON and /metrics answer', async () => {
    // Its first line is the overview's URL.
    const base = (
      await urlOf(
        ['dashboard', '--port', '0'],
        served.cliEnv({ LLMQ_DASHBOARD_TOKEN: DASHBOARD_TOKEN, REDIS_URL: oneSeed }),
      )
    ).replace(/\/overview$/, '');
    const headers = { authorization: `Bearer ${DASHBOARD_TOKEN}` };
    const get = async (path: string) => {
      const res = await fetch(base + path, { headers });
      expect(res.status, `${path}: ${res.status}`).toBe(200);
      return res;
    };
    // biome-ignore lint/suspicious/noExplicitAny: Bull Board's JSON, read by a test
    const board = (await (await get('/api/queues')).json()) as { queues: any[] };
    const pools = [served, dying, idle];
    const expected = pools.flatMap((p) => [p.names.queue, `${p.names.queue}-dead`]).sort();
    expect(board.queues.map((q) => q.name).sort()).toEqual(expected);
    // Each queue's counts, read on its own master, as BullMQ itself counts them; a dead-lettered
    // job is counted once, among the dead letters (as failed), not also under its queue's failed.
    for (const pool of pools) {
      const shown = board.queues.find((q) => q.name === pool.names.queue);
      const dead = board.queues.find((q) => q.name === `${pool.names.queue}-dead`);
      const letters = await pool.dlq.getJobCountByTypes('wait');
      const bull = await pool.queue.getJobCounts();
      expect(shown.counts).toEqual({ ...bull, failed: bull['failed']! - letters });
      expect(dead.counts).toMatchObject({ failed: letters, waiting: 0 });
    }
    const counts = (p: Pool) => board.queues.find((q) => q.name === p.names.queue).counts;
    const dead = (p: Pool) => board.queues.find((q) => q.name === `${p.names.queue}-dead`).counts;
    expect(counts(served).completed).toBe(3);
    expect(counts(dying).failed).toBe(0);
    expect(dead(dying).failed).toBe(2);
    expect(counts(idle).prioritized).toBe(3);

    // The pages the UI opens: a queue's jobs, a job, and Redis's figures (merged over masters).
    const page = (await (
      await get(
        `/api/queues?activeQueue=${served.names.queue}&status=completed&page=1&jobsPerPage=10`,
      )
    ).json()) as { queues: { name: string; jobs: { id: string }[] }[] };
    const jobs = page.queues.find((q) => q.name === served.names.queue)!.jobs;
    expect(jobs).toHaveLength(3);
    const one = (await (await get(`/api/queues/${served.names.queue}/${jobs[0]!.id}`)).json()) as {
      job: { id: string; returnValue: unknown };
      status: string;
    };
    expect(one).toMatchObject({ job: { id: jobs[0]!.id }, status: 'completed' });
    expect(one.job.returnValue).toEqual((await served.job(jobs[0]!.id))?.returnvalue);
    const stats = (await (await get('/api/redis/stats')).json()) as { mode: string };
    expect(stats.mode).toBe('cluster');

    // The limiter page's JSON: the window the served queue's worker spent in, as Redis holds it.
    expect((await get('/limiter')).headers.get('content-type')).toContain('text/html');
    const lim = (await (await get(`/api/limiter?queue=${served.names.queue}`)).json()) as {
      queues: string[];
      view: {
        windowMs: number;
        jobs: Record<string, number>;
        scopes: QueueStatus['limiter']['scopes'];
      };
    };
    expect(lim.queues).toEqual(pools.map((p) => p.names.queue).sort());
    expect(lim.view.windowMs).toBe(SERVED_LIMITS.windowMs);
    expect(lim.view.jobs['completed']).toBe(3);
    const tokens = lim.view.scopes.find((x) => x.scope === 'global')!.dimensions.tokens;
    expect(tokens.limit).toBe(100_000);
    const direct = await runCli(['status', '--json'], served.cliEnv());
    const s = JSON.parse(direct.stdout) as QueueStatus;
    const used = s.limiter.scopes.find((x) => x.scope === 'global')!.dimensions.tokens.used;
    expect(used).toBeGreaterThan(0);
    expect(tokens.used).toBe(used);

    const metrics = samples(await (await get('/metrics')).text());
    const q = (p: Pool) => `queue="${p.names.queue}"`;
    expect(sample(metrics, 'llmq_jobs', [q(served), 'state="completed"'])).toBe(3);
    expect(sample(metrics, 'llmq_jobs', [q(idle), 'state="prioritized"'])).toBe(3);
    expect(sample(metrics, 'llmq_dead_letters', [q(dying)])).toBe(2);
    expect(
      sample(metrics, 'llmq_window_limit', [q(served), 'scope="global"', 'dimension="tokens"']),
    ).toBe(100_000);
    expect(
      sample(metrics, 'llmq_window_used', [q(served), 'scope="global"', 'dimension="tokens"']),
    ).toBe(used);
  }, 180_000);
});
