import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { type Job, Queue, Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import { unpack } from 'msgpackr';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Producer } from '../producer/producer.ts';
import { bullPrefix, type QueueNames } from '../shared/keys.ts';
import type { Limiter } from '../shared/limiter/limiter.ts';
import {
  assertBullmqVersion,
  BULLMQ_WRITTEN_FOR,
  type GateWorker,
  HeadPeeker,
  installedBullmqVersion,
  MOVE_TO_ACTIVE,
  openGateWorker,
} from '../worker/bullmq-internals.ts';
import { FetchAlong } from '../worker/fetch-along.ts';
import { deleteKeys, newRedis, REDIS_URL, testLimiter, testNames, until } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
let producer: Producer;
let worker: Worker;
let queue: Queue;

beforeEach(() => {
  redis = newRedis();
  names = testNames('head');
  producer = new Producer({ redis, names });
  worker = new Worker(names.queue, null, {
    connection: redis.duplicate(),
    prefix: bullPrefix(names),
    autorun: false,
  });
  queue = new Queue(names.queue, { connection: redis.duplicate(), prefix: bullPrefix(names) });
});
afterEach(async () => {
  await producer.close();
  await worker.close();
  await queue.close();
  await (worker.opts.connection as Redis).quit();
  await (queue.opts.connection as Redis).quit();
  await deleteKeys(redis, names.prefix);
  redis.disconnect();
});

const request = (text: string) => ({
  model: 'claude-test',
  max_tokens: 16,
  messages: [{ role: 'user', content: text }],
});

/** A job added straight to BullMQ's delayed set (as a retry is), due in 1 ms. */
async function addDelayed(text: string, priority: number): Promise<string> {
  const job = await queue.add(
    'llmq',
    { request: request(text), cost: { requests: 1, inputTokens: 5, outputTokens: 16 }, priority },
    { delay: 1, priority },
  );
  await new Promise((r) => setTimeout(r, 20));
  return job.id!;
}

/** The ids BullMQ itself hands out next, taking `n` jobs. */
async function takeOrder(n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const job = (await worker.getNextJob(`t${i}`, { block: false })) as Job | undefined;
    if (!job) break;
    ids.push(job.id!);
  }
  return ids;
}

describe('peeking at the jobs BullMQ hands out next', () => {
  it('gives them in BullMQ order: priority first, then arrival', async () => {
    const a = await producer.enqueue(request('a'), { priority: 'batch' });
    const b = await producer.enqueue(request('b'), { priority: 'interactive' });
    const c = await producer.enqueue(request('c'), { priority: 'batch' });
    const d = await producer.enqueue(request('d'), { priority: 'interactive' });
    const peeker = new HeadPeeker(redis, names);
    const heads = await peeker.peekMany(3);
    expect(heads.map((h) => h.id)).toEqual([b, d, a]);
    // Charged to its model's scope (its limits are the model's).
    expect(heads[0]).toMatchObject({ priority: expect.any(Number), scopes: ['model:claude-test'] });
    expect(heads[0]!.cost.outputTokens).toBe(16);
    // Peeking took nothing, and BullMQ agrees on the order.
    expect(await takeOrder(4)).toEqual([b, d, a, c]);
    expect(await peeker.peekMany(3)).toEqual([]);
  });

  it('puts a due delayed job where its promotion will: ahead of less urgent ones', async () => {
    const a = await producer.enqueue(request('a'), { priority: 'batch' });
    const b = await producer.enqueue(request('b'), { priority: 'batch' });
    const late = await addDelayed('late', 1);
    expect((await new HeadPeeker(redis, names).peekMany(3)).map((h) => h.id)).toEqual([late, a, b]);
    expect(await takeOrder(3)).toEqual([late, a, b]);
  });

  it('puts a due delayed job between jobs of higher and lower priority, behind its peers', async () => {
    const a = await producer.enqueue(request('a'), { priority: 10 });
    const b = await producer.enqueue(request('b'), { priority: 100 });
    const peer = await producer.enqueue(request('peer'), { priority: 50 });
    const mid = await addDelayed('mid', 50);
    const order = [a, peer, mid, b];
    expect((await new HeadPeeker(redis, names).peekMany(4)).map((h) => h.id)).toEqual(order);
    expect(await takeOrder(4)).toEqual(order);
  });

  it('gives only the first job when more delayed jobs are due than one peek looks at', async () => {
    const first = await producer.enqueue(request('first'), { priority: 1 });
    await producer.enqueue(request('second'), { priority: 1 });
    await queue.addBulk(
      Array.from({ length: 100 }, (_, i) => ({
        name: 'llmq',
        data: {
          request: request(`d${i}`),
          cost: { requests: 1, inputTokens: 5, outputTokens: 16 },
          priority: 100,
        },
        opts: { delay: 1, priority: 100 },
      })),
    );
    await new Promise((r) => setTimeout(r, 20));
    expect((await new HeadPeeker(redis, names).peekMany(5)).map((h) => h.id)).toEqual([first]);
  });

  it('gives none while the queue is paused', async () => {
    await producer.enqueue(request('a'));
    await queue.pause();
    expect(await new HeadPeeker(redis, names).peekMany(5)).toEqual([]);
    await queue.resume();
    expect(await new HeadPeeker(redis, names).peekMany(5)).toHaveLength(1);
  });
});

describe('the BullMQ version check', () => {
  it('accepts the installed bullmq, the one version package.json pins', () => {
    const pinned = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'))
      .dependencies.bullmq;
    expect(pinned).toBe(BULLMQ_WRITTEN_FOR);
    expect(installedBullmqVersion()).toBe(BULLMQ_WRITTEN_FOR);
    expect(() => assertBullmqVersion()).not.toThrow();
  });

  it('refuses any other version, a patch release too, naming it and what to install', () => {
    for (const v of ['6.7.1', '6.8.0', '7.0.0', '5.7.1']) {
      expect(() => assertBullmqVersion(v)).toThrow(
        `bullmq ${v} is installed, but llmq's worker reads BullMQ 6.7.0's keys and scripts`,
      );
    }
    expect(() => assertBullmqVersion('6.7.1')).toThrow(/npm install bullmq@6\.7\.0/);
  });
});

const sha1 = (text: string) => createHash('sha1').update(text).digest('hex');

/** MONITOR's quoting of an argument undone (Redis escapes `\\ " \\n \\r \\t \\a \\b` and `\\xHH`). */
function unquote(text: string): string {
  const named: Record<string, string> = { n: '\n', r: '\r', t: '\t', a: '\x07', b: '\b' };
  return text.replace(/\\(x[0-9a-f]{2}|.)/g, (_, e: string) =>
    e.length === 3 ? String.fromCharCode(Number.parseInt(e.slice(1), 16)) : (named[e] ?? e),
  );
}

/** The KEYS and ARGV of one script call, as MONITOR shows it (EVALSHA or EVAL). */
interface SeenCall {
  /** The script's sha1. */
  readonly sha: string;
  readonly keys: string[];
  readonly args: string[];
}

/**
 * MONITOR on a socket of its own, each command's arguments as ioredis's monitor gives them (only
 * `\"` unescaped). Not ioredis's monitor mode: under load its first lines can arrive with the
 * MONITOR's own reply, before it switches modes, and it takes them for replies.
 */
async function monitorCommands(onCommand: (args: string[]) => void) {
  const url = new URL(REDIS_URL);
  const socket = connect(Number(url.port || 6379), url.hostname);
  socket.setEncoding('utf8');
  let buffered = '';
  // MONITOR's own +OK, after AUTH's when the URL has a password.
  let oks = url.password ? 2 : 1;
  const started = new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.on('data', (chunk: string) => {
      buffered += chunk;
      for (let end = buffered.indexOf('\r\n'); end >= 0; end = buffered.indexOf('\r\n')) {
        const line = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        if (line === '+OK' && --oks === 0) resolve();
        const at = line.indexOf('] "');
        if (at < 0) continue;
        onCommand(
          line
            .slice(at + 3, -1)
            .split('" "')
            .map((a) => a.replace(/\\"/g, '"')),
        );
      }
    });
  });
  if (url.password) socket.write(`AUTH ${decodeURIComponent(url.password)}\r\n`);
  socket.write('MONITOR\r\n');
  await started;
  return () => socket.destroy();
}

/** Watches the commands that name `waitKey` as their first key, from MONITOR. */
async function watchMoveToActive(numberOfKeys: number, waitKey: string) {
  const seen: SeenCall[] = [];
  const stop = await monitorCommands((args) => {
    const [command, script, n, ...rest] = args;
    if (!/^eval(sha)?$/i.test(command ?? '') || Number(n) !== numberOfKeys) return;
    if (rest[0] !== waitKey) return;
    const sha = /^evalsha$/i.test(command!) ? script! : sha1(unquote(script!));
    seen.push({ sha, keys: rest.slice(0, numberOfKeys), args: rest.slice(numberOfKeys) });
  });
  return { seen, stop };
}

/** The KEYS and ARGV lines of a BullMQ script's `--[[ ]]` header. */
function headerOf(lua: string) {
  const header = lua.slice(0, lua.indexOf(']]'));
  const lines = (what: string) =>
    [...header.matchAll(new RegExp(`^\\s*${what}\\[(\\d+)\\]\\s+(.+)$`, 'gm'))].map((m) => ({
      n: Number(m[1]),
      what: m[2]!.trim(),
    }));
  const opts = [...header.matchAll(/^\s*opts - (\w+)/gm)].map((m) => m[1]!);
  return { keys: lines('KEYS'), argv: lines('ARGV'), opts };
}

describe("BullMQ's moveToActive, as llmq's gate sends it", () => {
  let bull: GateWorker;
  let limiter: Limiter;
  let base: string;
  beforeEach(() => {
    bull = openGateWorker(redis, names, {
      lockDuration: 30_000,
      stalledInterval: 30_000,
      maxStalledCount: 1,
    });
    limiter = testLimiter({ redis, names, limits: { requests: 10 } });
    base = `${bullPrefix(names)}:${names.queue}`;
  });
  afterEach(async () => {
    await bull.close();
    await (bull.opts.connection as Redis).quit();
    await limiter.close();
  });

  it('sends the keys and arguments its shipped header lists, in that order', () => {
    const header = headerOf(MOVE_TO_ACTIVE.lua);
    // What each KEYS line of the header names, as BullMQ's key type.
    const keyType: Record<string, string> = {
      'wait key': 'wait',
      'active key': 'active',
      'prioritized key': 'prioritized',
      'stream events key': 'events',
      'stalled key': 'stalled',
      'rate limiter key': 'limiter',
      'delayed key': 'delayed',
      'paused key': 'paused',
      'meta key': 'meta',
      'pc priority counter': 'pc',
      'marker key': 'marker',
    };
    expect(header.keys.map((k) => k.n)).toEqual(header.keys.map((_, i) => i + 1));
    expect(header.keys).toHaveLength(MOVE_TO_ACTIVE.numberOfKeys);
    expect(bull.moveToActiveKeys).toEqual(
      header.keys.map((k) => `${base}:${keyType[k.what] ?? `(unknown: ${k.what})`}`),
    );

    expect(header.argv.map((a) => a.what)).toEqual(['key prefix', 'timestamp', 'opts']);
    const [prefix, timestamp, opts] = bull.moveToActiveArgs('tok');
    expect(prefix).toBe(`${base}:`);
    expect(typeof timestamp).toBe('number');
    expect(Object.keys(unpack(opts as Buffer)).sort()).toEqual([...header.opts].sort());
  });

  it("sends exactly what BullMQ's own worker sends: the same script, keys and arguments", async () => {
    await producer.enqueue(request('a'));
    await producer.enqueue(request('b'));
    const watch = await watchMoveToActive(MOVE_TO_ACTIVE.numberOfKeys, `${base}:wait`);
    try {
      // BullMQ's own fetch, then llmq's: a moveToActive sent behind the limiter's acquire.
      expect(await bull.nextJob('same-token')).toBeDefined();
      const along = new FetchAlong(bull, [{ id: 'a' }], () => 'same-token');
      const cost = { requests: 1, inputTokens: 10, outputTokens: 16 };
      expect((await limiter.line(cost).attempt(along.along)).ok).toBe(true);
      expect(await along.fetches[0]!.job).toBeDefined();
      await until(() => watch.seen.length >= 2);
    } finally {
      watch.stop();
    }
    const [bullmqSent, llmqSent] = watch.seen as [SeenCall, SeenCall];
    expect(watch.seen).toHaveLength(2);
    expect([bullmqSent.sha, llmqSent.sha]).toEqual([
      sha1(MOVE_TO_ACTIVE.lua),
      sha1(MOVE_TO_ACTIVE.lua),
    ]);
    expect(llmqSent.keys).toEqual(bullmqSent.keys);
    // The key prefix and the packed options alike; the timestamps are each call's own.
    expect(llmqSent.args).toHaveLength(3);
    expect([llmqSent.args[0], llmqSent.args[2]]).toEqual([bullmqSent.args[0], bullmqSent.args[2]]);
    expect(Number(llmqSent.args[1])).toBeGreaterThanOrEqual(Number(bullmqSent.args[1]));
  });
});
