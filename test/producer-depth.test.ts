import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PRODUCER_SCRIPTS } from '../producer/depth-gate.ts';
import { Producer, type ProducerOptions } from '../producer/producer.ts';
import { QueueFullError } from '../shared/errors.ts';
import type { JobData } from '../shared/job.ts';
import { bullPrefix, type QueueNames } from '../shared/keys.ts';
import { deleteKeys, newRedis, REDIS_URL, testNames, tsxEval, until } from './helpers.ts';

const run = promisify(execFile);

let redis: Redis;
let names: QueueNames;
const closers: (() => Promise<unknown>)[] = [];

beforeEach(() => {
  redis = newRedis();
  names = testNames('pdepth');
});
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
  await deleteKeys(redis, names.prefix);
  redis.disconnect();
});

function make(o: Partial<ProducerOptions> = {}): Producer {
  const p = new Producer({ redis, names, ...o });
  closers.push(() => p.close());
  return p;
}

const request = (text = 'hello') => ({
  model: 'claude-test',
  max_tokens: 32,
  messages: [{ role: 'user', content: text }],
});

/** Waiting jobs as BullMQ holds them, read atomically. */
async function bullDepth(): Promise<number> {
  const base = `${bullPrefix(names)}:${names.queue}`;
  const r = await redis
    .multi()
    .zcard(`${base}:prioritized`)
    .llen(`${base}:wait`)
    .zcard(`${base}:delayed`)
    .exec();
  return (r ?? []).reduce((sum, [, n]) => sum + Number(n), 0);
}

/** A real BullMQ worker that takes jobs out of the queue at a modest pace. */
function startConsumer(delayMs: number, concurrency = 1): Worker<JobData> {
  const worker = new Worker<JobData>(
    names.queue,
    async () => new Promise((r) => setTimeout(() => r({}), delayMs)),
    {
      connection: redis.duplicate(),
      prefix: bullPrefix(names),
      concurrency,
    },
  );
  closers.push(() => worker.close());
  return worker;
}

describe('producer scripts', () => {
  it('every Lua script of the producer loads', async () => {
    expect(Object.keys(PRODUCER_SCRIPTS).sort()).toEqual([
      'countTokens',
      'releaseDepth',
      'reserveDepth',
      'takeWaiting',
    ]);
    for (const s of Object.values(PRODUCER_SCRIPTS)) {
      expect(s.lua).toMatch(/^--\[\[/);
      expect(await redis.script('LOAD', s.lua)).toMatch(/^[0-9a-f]{40}$/);
    }
  });
});

describe('bounded depth', () => {
  it('never exceeds its bound while 20 producers in 2 processes race; the refused get a retry hint', async () => {
    const bound = 40;
    const child = `
      import { Redis } from 'ioredis';
      import { Producer } from './producer/producer.ts';
      const [names, bound, forMs] = [JSON.parse(process.argv[1]), Number(process.argv[2]), Number(process.argv[3])];
      const conns = Array.from({ length: 10 }, () => new Redis(process.env.REDIS_URL, { maxRetriesPerRequest: null }));
      const producers = conns.map((redis) => new Producer({ redis, names, maxDepth: bound, retryAfterMs: 750 }));
      // Ready, then wait for the parent's go: both processes race from the same moment.
      await conns[0].incr(names.prefix + ':test:ready');
      await conns[0].blpop(names.prefix + ':test:go', 0);
      const at = Date.now();
      const req = { model: 'claude-test', max_tokens: 32, messages: [{ role: 'user', content: 'race' }] };
      const out = { accepted: 0, refused: 0, hints: [], other: [] };
      await Promise.all(producers.map(async (p) => {
        while (Date.now() < at + forMs) {
          try {
            await p.enqueue(req);
            out.accepted++;
          } catch (err) {
            if (err.code === 'QUEUE_FULL' && err.name === 'QueueFullError') {
              out.refused++;
              if (out.hints.length < 20) out.hints.push(err.retryAfterMs);
            } else out.other.push(String(err));
            await new Promise((r) => setTimeout(r, 2 + Math.random() * 8));
          }
        }
      }));
      console.log(JSON.stringify(out));
      await Promise.all(producers.map((p) => p.close()));
      for (const c of conns) c.disconnect();
    `;
    const forMs = 2_000;
    const spawn = () =>
      run(process.execPath, tsxEval(child, [JSON.stringify(names), String(bound), String(forMs)]), {
        cwd: process.cwd(),
        env: { ...process.env, REDIS_URL },
      });
    let raced = false;
    const children = Promise.all([spawn(), spawn()]).finally(() => {
      raced = true;
    });
    await until(async () => Number(await redis.get(`${names.prefix}:test:ready`)) === 2, 60_000);
    await redis.rpush(`${names.prefix}:test:go`, 'go', 'go');
    // A consumer drains while they race, so the bound is hit again and again.
    startConsumer(10, 2);
    const samples: number[] = [];
    while (!raced) {
      samples.push(await bullDepth());
      await new Promise((r) => setImmediate(r));
    }
    const outs = (await children).map(
      (c) =>
        JSON.parse(c.stdout) as {
          accepted: number;
          refused: number;
          hints: number[];
          other: string[];
        },
    );
    const accepted = outs.reduce((s, o) => s + o.accepted, 0);
    const refused = outs.reduce((s, o) => s + o.refused, 0);
    expect(outs.flatMap((o) => o.other)).toEqual([]);
    // Enough looks to have seen the race (a loaded machine samples less often).
    expect(samples.length).toBeGreaterThan(20);
    expect(Math.max(...samples)).toBeLessThanOrEqual(bound);
    // Producers' reservations count too (a job being added takes its room first), so BullMQ's
    // own sets stay somewhat below the bound while 20 producers are mid-add.
    expect(Math.max(...samples)).toBeGreaterThanOrEqual(bound / 2);
    expect(accepted).toBeGreaterThan(bound);
    expect(refused).toBeGreaterThan(0);
    expect(new Set(outs.flatMap((o) => o.hints))).toEqual(new Set([750]));
    console.log(
      `depth race: ${accepted} accepted, ${refused} refused, ${samples.length} samples, max depth ${Math.max(...samples)}`,
    );
  }, 90_000);

  it('a full queue refuses with QueueFullError, or with wait: true waits until there is room', async () => {
    const p = make({ maxDepth: 5, retryAfterMs: 200 });
    for (let i = 0; i < 5; i++) await p.enqueue(request());
    const err = await p.enqueue(request()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(QueueFullError);
    expect(err).toMatchObject({ code: 'QUEUE_FULL', depth: 5, maxDepth: 5, retryAfterMs: 200 });
    expect(
      await p.enqueue(request(), { wait: true, waitTimeoutMs: 300 }).catch((e: unknown) => e),
    ).toBeInstanceOf(QueueFullError);

    const others = [
      make({ maxDepth: 5, retryAfterMs: 200 }),
      make({ maxDepth: 5, retryAfterMs: 200 }),
    ];
    let stop = false;
    const samples: number[] = [];
    const sampler = (async () => {
      while (!stop) {
        samples.push(await bullDepth());
        await new Promise((r) => setTimeout(r, 2));
      }
    })();
    // The ids the full queue refused (each enqueue reserves its own id, then waits for room).
    const refused = new Set<string>();
    for (const q of [p, ...others]) {
      const reserve = q.gate.reserve.bind(q.gate);
      q.gate.reserve = async (ids, tenant) => {
        const outcome = await reserve(ids, tenant);
        if (!outcome.ok && 'full' in outcome) for (const id of ids) refused.add(id);
        return outcome;
      };
    }
    const adding = Promise.all(
      [p, ...others].map((q) =>
        Promise.all(Array.from({ length: 10 }, () => q.enqueue(request(), { wait: true }))),
      ),
    );
    // Every one of the 30 was refused and waits; none got in.
    await until(() => refused.size === 30, 10_000);
    expect(await bullDepth()).toBe(5);
    const consumer = startConsumer(5);
    let processed = 0;
    consumer.on('completed', () => processed++);
    const ids = (await adding).flat();
    stop = true;
    await sampler;
    expect(new Set(ids).size).toBe(30);
    expect(Math.max(...samples)).toBeLessThanOrEqual(5);
    await until(() => processed === 35, 20_000);
  }, 30_000);

  it('a tenant bound holds per tenant, and frees up as its jobs start', async () => {
    const p = make({ maxDepth: 100, tenantMaxDepth: { small: 3, '*': 10 } });
    for (let i = 0; i < 3; i++) await p.enqueue(request(), { tenant: 'small' });
    const err = await p.enqueue(request(), { tenant: 'small' }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'QUEUE_FULL', depth: 3, maxDepth: 3 });
    expect((err as Error).message).toContain('tenant "small"');
    await expect(p.enqueue(request(), { tenant: 'big' })).resolves.toBeTypeOf('string');
    await expect(p.enqueue(request())).resolves.toBeTypeOf('string');
    const consumer = startConsumer(1);
    let processed = 0;
    consumer.on('completed', () => processed++);
    await until(() => processed >= 2);
    await consumer.pause();
    await expect(p.enqueue(request(), { tenant: 'small' })).resolves.toBeTypeOf('string');
  });

  it('a producer that dies between reserve and add leaks nothing: its reservation expires', async () => {
    const p = make({ maxDepth: 2, reservationTtlMs: 1_000 });
    // Two reservations nobody releases: what a crashed producer leaves behind.
    expect((await p.gate.reserve(['ghost-1'], undefined)).ok).toBe(true);
    expect((await p.gate.reserve(['ghost-2'], undefined)).ok).toBe(true);
    await expect(p.enqueue(request())).rejects.toBeInstanceOf(QueueFullError);
    const started = Date.now();
    const id = await p.enqueue(request(), { wait: true, waitTimeoutMs: 5_000 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(800);
    expect(await p.queue.getJobState(id)).toBe('prioritized');
    expect(await p.gate.depth()).toBe(1);
  });

  it('enqueueMany under a bound adds whole chunks or none of a chunk', async () => {
    const p = make({ maxDepth: 10 });
    for (let i = 0; i < 5; i++) await p.enqueue(request());
    const all = Array.from({ length: 8 }, (_, i) => request(`m${i}`));
    await expect(p.enqueueMany(all, { chunkSize: 8 })).rejects.toBeInstanceOf(QueueFullError);
    expect(await p.queue.count()).toBe(5);
    const added: number[] = [];
    await expect(
      p.enqueueMany(all, { chunkSize: 4, onChunk: (ids, first) => added.push(first, ids.length) }),
    ).rejects.toBeInstanceOf(QueueFullError);
    expect(added).toEqual([0, 4]);
    expect(await p.queue.count()).toBe(9);
    startConsumer(2);
    const ids = await p.enqueueMany(all, { chunkSize: 100, wait: true, waitTimeoutMs: 10_000 });
    expect(ids).toHaveLength(8);
  });
});
