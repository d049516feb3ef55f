import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../shared/private-redis.ts';
import { connectRedis, countKeysMatching } from '../shared/redis.ts';
import { type FailoverRun, openFailoverPool, runThroughFailover } from './fixtures/failover-run.ts';
import { startSentinel, type TestSentinel } from './fixtures/redis-servers.ts';
import { request, runCli } from './fixtures/worker-harness.ts';
import { REDIS_URL, testNames } from './helpers.ts';

let sentinel: TestSentinel;
let run: FailoverRun | undefined;

beforeAll(async () => {
  sentinel = await startSentinel();
}, 90_000);

afterAll(async () => {
  await run?.close();
  await sentinel?.stop();
});

/** `llmq enqueue` of one request with REDIS_URL `url`, under a prefix of its own. */
async function enqueueWith(url: string) {
  const names = testNames('badurl');
  const env = {
    ...process.env,
    REDIS_URL: url,
    LLMQ_QUEUE: names.queue,
    LLMQ_PREFIX: names.prefix,
  };
  const out = await runCli(['enqueue'], env, JSON.stringify(request('Hi', 20)));
  return { ...out, names };
}

/** Keys under a prefix on the deployment `url` names. */
async function keysOn(url: string, prefix: string): Promise<number> {
  const r = connectRedis(url);
  r.on('error', () => {});
  try {
    return await countKeysMatching(r, `${prefix}:*`);
  } finally {
    r.disconnect();
  }
}

describe('llmq through Sentinel (a master, a replica, three sentinels)', () => {
  it('the master SIGKILLed mid-run: every job completes once, no window over the limit, every worker carries on', async () => {
    run = await openFailoverPool('se-failover', sentinel.url());
    await runThroughFailover(run, {
      jobs: 30,
      failAfter: 8,
      fail: () => sentinel.killMaster(),
    });
  }, 180_000);
});

describe('a bad REDIS_URL for `llmq enqueue`: one line, the documented exit code, nothing enqueued', () => {
  it('a master name the sentinels do not know exits 2', async () => {
    const url = sentinel.url('nosuchmaster');
    const { code, stdout, stderr, names } = await enqueueWith(url);
    expect(code).toBe(2);
    expect(stdout).toBe('');
    expect(stderr).toBe(
      `llmq: REDIS_URL ${url}: the sentinels know no master named "nosuchmaster" ` +
        `(they know: ${sentinel.masterName}); put the name from "sentinel monitor" after the last / of REDIS_URL\n`,
    );
    expect(await keysOn(sentinel.url(), names.prefix)).toBe(0);
  }, 60_000);

  it('a cluster URL pointed at a single node exits 2', async () => {
    const single = new URL(REDIS_URL);
    const at = `${single.hostname}:${single.port || 6379}`;
    const { code, stdout, stderr, names } = await enqueueWith(`redis+cluster://${at}`);
    expect(code).toBe(2);
    expect(stdout).toBe('');
    expect(stderr).toBe(
      `llmq: REDIS_URL redis+cluster://${at}: ${at} is a single Redis, not a cluster ` +
        `(cluster support is disabled); use redis://${at}\n`,
    );
    expect(await keysOn(REDIS_URL, names.prefix)).toBe(0);
  }, 60_000);

  it('an unreachable seed list exits 1', async () => {
    const [a, b] = [await freePort(), await freePort()];
    const url = `redis+cluster://127.0.0.1:${a},127.0.0.1:${b}`;
    const { code, stdout, stderr } = await enqueueWith(url);
    expect(code).toBe(1);
    expect(stdout).toBe('');
    expect(stderr).toBe(
      `llmq: Redis at ${url} did not answer (none of the seed nodes 127.0.0.1:${a}, ` +
        `127.0.0.1:${b} answered: connection refused): start Redis or set REDIS_URL\n`,
    );
  }, 60_000);
});
