import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, RedisUnavailableError } from '../shared/errors.ts';
import { freePort, type PrivateRedis, startPrivateRedis } from '../shared/private-redis.ts';
import { assertRedis, connectRedis, isCluster } from '../shared/redis.ts';
import { startSentinel, type TestSentinel } from './fixtures/redis-servers.ts';
import { until } from './helpers.ts';

/** What assertRedis throws for a URL (it must throw). */
async function refusal(url: string): Promise<Error> {
  return assertRedis(url, 1_000).then(
    () => {
      throw new Error(`expected ${url} to be refused`);
    },
    (err: Error) => err,
  );
}

describe('through Sentinel (a master, a replica, three sentinels)', () => {
  let sentinel: TestSentinel;
  let client: Redis;

  beforeAll(async () => {
    sentinel = await startSentinel();
    client = connectRedis(sentinel.url()) as Redis;
    client.on('error', () => {});
  }, 60_000);

  afterAll(async () => {
    client?.disconnect();
    await sentinel?.stop();
  });

  it('finds the master from the URL and runs Lua there', async () => {
    await expect(assertRedis(sentinel.url())).resolves.toBeUndefined();
    expect(isCluster(client)).toBe(false);
    await client.set('{q}:a', '1');
    expect(await client.eval("return redis.call('INCR', KEYS[1])", 1, '{q}:a')).toBe(2);
    expect(client.stream?.remotePort).toBe(sentinel.master.port);
  });

  it('a master name the sentinels do not know is one line naming the ones they know', async () => {
    const err = await refusal(sentinel.url('mymaster'));
    expect(err).toBeInstanceOf(ConfigError);
    expect(err.message).toBe(
      `REDIS_URL ${sentinel.url('mymaster')}: the sentinels know no master named "mymaster" ` +
        `(they know: ${sentinel.masterName}); put the name from "sentinel monitor" after the last / of REDIS_URL`,
    );
  });

  it('follows the promoted replica after the master’s SIGKILL; an acknowledged write is kept', async () => {
    await client.set('{q}:kept', 'before');
    expect(await client.call('WAIT', '1', '2000')).toBe(1);
    const promoted = await sentinel.killMaster();
    expect(promoted).toBe(sentinel.replica.port);
    // The same client reconnects by itself: sentinels now name the replica.
    await until(
      async () => (await client.get('{q}:kept').catch(() => null)) === 'before',
      20_000,
      100,
    );
    expect(client.stream?.remotePort).toBe(promoted);
    await client.set('{q}:kept', 'after');
    expect(await client.get('{q}:kept')).toBe('after');
  });
});

describe('a REDIS_URL that does not fit what answers', () => {
  let single: PrivateRedis;
  beforeAll(async () => {
    single = await startPrivateRedis();
  });
  afterAll(() => single?.stop());

  it('an unreachable seed list says none of the seeds answered', async () => {
    const [a, b] = [await freePort(), await freePort()];
    const err = await refusal(`redis+cluster://:secret@127.0.0.1:${a},127.0.0.1:${b}`);
    expect(err).toBeInstanceOf(RedisUnavailableError);
    expect(err.message).toBe(
      `Redis at redis+cluster://:***@127.0.0.1:${a},127.0.0.1:${b} did not answer ` +
        `(none of the seed nodes 127.0.0.1:${a}, 127.0.0.1:${b} answered: connection refused): ` +
        'start Redis or set REDIS_URL',
    );
  });

  it('a cluster URL pointed at a single node says cluster support is disabled there', async () => {
    const err = await refusal(`redis+cluster://127.0.0.1:${single.port}`);
    expect(err).toBeInstanceOf(ConfigError);
    expect(err.message).toBe(
      `REDIS_URL redis+cluster://127.0.0.1:${single.port}: 127.0.0.1:${single.port} is a single ` +
        `Redis, not a cluster (cluster support is disabled); use redis://127.0.0.1:${single.port}`,
    );
  });

  it('a Sentinel URL naming a plain Redis says it is not a Sentinel', async () => {
    const err = await refusal(`redis+sentinel://127.0.0.1:${single.port}/m`);
    expect(err).toBeInstanceOf(ConfigError);
    expect(err.message).toMatch(/is not a Sentinel \(it refused SENTINEL\); list the sentinels/);
  });

  it('unreachable sentinels say none of them answered', async () => {
    const port = await freePort();
    const err = await refusal(`redis+sentinel://127.0.0.1:${port}/m`);
    expect(err).toBeInstanceOf(RedisUnavailableError);
    expect(err.message).toContain(
      `none of the sentinels 127.0.0.1:${port} answered: connection refused`,
    );
  });

  it('a single node answers a single-node URL', async () => {
    await expect(assertRedis(single.url)).resolves.toBeUndefined();
    const r = connectRedis(single.url);
    expect(await r.ping()).toBe('PONG');
    r.disconnect();
  });
});
