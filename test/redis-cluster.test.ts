import { randomBytes } from 'node:crypto';
import { Queue, Worker } from 'bullmq';
import type { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BudgetLedger } from '../shared/budgets.ts';
import { ConfigError } from '../shared/errors.ts';
import { bullPrefix, type QueueNames } from '../shared/keys.ts';
import { Limiter } from '../shared/limiter/limiter.ts';
import {
  assertRedis,
  connectRedis,
  countKeysMatching,
  deleteKeysMatching,
  forEachMaster,
  isCluster,
  type RedisClient,
} from '../shared/redis.ts';
import { CLUSTER_START_MS, startCluster, type TestCluster } from './fixtures/redis-servers.ts';
import { keep, settle, until } from './helpers.ts';

const PAIR = `
redis.call('SET', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[1])
return {redis.call('GET', KEYS[1]), redis.call('LLEN', KEYS[2])}
`;

describe('on a 3-master, 3-replica Redis Cluster', () => {
  let cluster: TestCluster;
  let client: RedisClient;
  const prefix = `llmqtest-cluster-${randomBytes(3).toString('hex')}`;
  /** Queue names whose hash tags land on three different masters, with those masters' ports. */
  const spread: { names: QueueNames; master: number }[] = [];

  beforeAll(async () => {
    cluster = await startCluster(3);
    client = connectRedis(cluster.url);
    client.on('error', () => {});
    const masters = new Set<number>();
    while (spread.length < 3) {
      const queue = `q${randomBytes(3).toString('hex')}`;
      const master = await cluster.masterOfSlot(await cluster.keySlot(`{${queue}}`));
      if (masters.has(master)) continue;
      masters.add(master);
      spread.push({ names: { prefix, queue }, master });
    }
  }, CLUSTER_START_MS);

  afterAll(async () => {
    client?.disconnect();
    await cluster?.stop();
  });

  it('connects from the URL and runs a Lua script whose keys share a queue’s hash tag', async () => {
    expect(isCluster(client)).toBe(true);
    const cmd = client as Cluster & {
      llmqTestPair(...a: string[]): Promise<[string, number]>;
    };
    cmd.defineCommand('llmqTestPair', { numberOfKeys: 2, lua: PAIR });
    for (const { names } of spread) {
      const a = `${bullPrefix(names)}:a`;
      const b = `${bullPrefix(names)}:b`;
      await client.set(a, 'x');
      expect(await client.get(a)).toBe('x');
      expect(await cmd.llmqTestPair(a, b, 'v')).toEqual(['v', 1]);
    }
    // Keys of two queues live on two masters: one script cannot touch both.
    const [one, two] = spread;
    await expect(
      cmd.llmqTestPair(`${bullPrefix(one!.names)}:a`, `${bullPrefix(two!.names)}:b`, 'v'),
    ).rejects.toThrow(/CROSSSLOT/);
  });

  it('holds a call’s money with its admission and settles it, on each master', async () => {
    const settings = {
      budgets: { global: { day: 0.01 } },
      policy: 'wait' as const,
      prices: { 'claude-test-1': { input: 3, output: 15 } },
    };
    const cost = { requests: 1, inputTokens: 100, outputTokens: 200 };
    for (const { names } of spread) {
      const lim = new Limiter({ redis: client, names, limits: { tokens: 10_000 } });
      const ledger = new BudgetLedger(client, names, settings);
      const claim = () => ({ ...cost, money: ledger.claim('claude-test-1', undefined, cost) });
      // 3,300 µ$ each against 10,000: three fit, the fourth is refused holding nothing.
      const admitted = [];
      for (let i = 0; i < 3; i++) {
        const d = await lim.tryAcquire(claim());
        if (!d.ok) throw new Error(`expected admission, got ${d.reason}`);
        admitted.push(d.reservation);
      }
      expect(await lim.tryAcquire(claim())).toMatchObject({ ok: false, reason: 'money' });
      await settle(lim, admitted[0]!, { inputTokens: 90, outputTokens: 10, costMicros: 420 });
      await lim.release(admitted[1]!);
      await keep(lim, admitted[2]!);
      expect((await ledger.spend()).day['global']).toBe(420 + 3_300);
      expect((await lim.snapshot()).inFlight).toBe(0);
      await lim.close();
      await lim.destroy();
    }
  });

  it('runs BullMQ queues with the llmq prefix, each on its own master', async () => {
    expect(new Set(spread.map((s) => s.master)).size).toBe(3);
    const done = new Map<string, number>();
    const workers = spread.map(
      ({ names }) =>
        new Worker(names.queue, async (job) => `${job.data.n}`, {
          connection: client,
          prefix: bullPrefix(names),
        }),
    );
    for (const w of workers) {
      w.on('completed', (job) => done.set(job.queueName, (done.get(job.queueName) ?? 0) + 1));
    }
    const queues = spread.map(
      ({ names }) => new Queue(names.queue, { connection: client, prefix: bullPrefix(names) }),
    );
    try {
      for (const q of queues) {
        await q.addBulk(Array.from({ length: 10 }, (_, n) => ({ name: 'call', data: { n } })));
      }
      await until(() => spread.every(({ names }) => done.get(names.queue) === 10), 20_000);
      for (const q of queues) expect(await q.getJobCounts('completed')).toEqual({ completed: 10 });
      // Each queue's keys are on its own master only.
      for (const { names, master } of spread) {
        const perMaster = await forEachMaster(client, async (m) => ({
          port: m.options.port,
          n: await countKeysMatching(m, `${bullPrefix(names)}:*`),
        }));
        expect(perMaster.filter((p) => p.n > 0).map((p) => p.port)).toEqual([master]);
      }
    } finally {
      await Promise.all(workers.map((w) => w.close()));
      await Promise.all(queues.map((q) => q.close()));
    }
  });

  it('counts and deletes a prefix’s keys on every master', async () => {
    expect(await countKeysMatching(client, `${prefix}:*`)).toBeGreaterThan(30);
    const deleted = await deleteKeysMatching(client, `${prefix}:*`);
    expect(deleted).toBeGreaterThan(30);
    expect(await countKeysMatching(client, `${prefix}:*`)).toBe(0);
  });

  it('a single-node URL pointed at a cluster node says to use redis+cluster://', async () => {
    await expect(assertRedis(cluster.url)).resolves.toBeUndefined();
    const port = cluster.nodes[0]!.port;
    const err = await assertRedis(`redis://127.0.0.1:${port}`).catch((e: Error) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toBe(
      `REDIS_URL redis://127.0.0.1:${port}: 127.0.0.1:${port} is a Redis Cluster node; ` +
        `use redis+cluster://127.0.0.1:${port}`,
    );
  });

  it('a write acknowledged by a replica survives its master’s SIGKILL; the client carries on', async () => {
    const { names, master } = spread[0]!;
    const key = `${bullPrefix(names)}:kept`;
    await client.set(key, 'before');
    const node = (client as Cluster).nodes('master').find((m) => m.options.port === master)!;
    expect(await node.call('WAIT', '1', '2000')).toBe(1);
    const promoted = await cluster.killMaster(master);
    expect(promoted).not.toBe(master);
    // The client learns the new slot owner by itself (MOVED / refresh) and keeps going.
    await until(async () => (await client.get(key).catch(() => null)) === 'before', 20_000, 100);
    await client.set(key, 'after');
    expect(await client.get(key)).toBe('after');
    expect(await cluster.masterOfSlot(await cluster.keySlot(key))).toBe(promoted);
    await deleteKeysMatching(client, `${prefix}:*`);
  });
});
