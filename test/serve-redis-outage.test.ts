import { afterEach, describe, expect, it } from 'vitest';
import { hashApiKey } from '../producer/http/api-keys.ts';
import { startHttpApi } from '../producer/http/server.ts';
import type { Producer } from '../producer/producer.ts';
import { resolveConfig } from '../shared/config.ts';
import { RedisUnavailableError } from '../shared/errors.ts';
import { API_VERSION } from './fixtures/gateway.ts';
import { type AofRedis, startAofRedis } from './fixtures/redis-servers.ts';
import { testNames, until } from './helpers.ts';

const KEY = 'sk-outage-0123456789';
const API_KEYS = `acme:${hashApiKey(KEY)}`;
const message = (text: string) => ({
  model: 'claude-haiku-4-5',
  max_tokens: 20,
  messages: [{ role: 'user', content: text }],
});

let redis: AofRedis | undefined;
const closers: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close().catch(() => {});
  await redis?.stop();
  redis = undefined;
});

const configOn = (url: string) => {
  const names = testNames('outage');
  return resolveConfig({
    flags: { queue: names.queue, prefix: names.prefix, redisUrl: url },
    env: {},
  });
};

describe('llmq serve while its Redis goes down', () => {
  it('answers 503 redis_unavailable with a retry hint on every route, then takes jobs again by itself once Redis is back', async () => {
    redis = await startAofRedis();
    const api = await startHttpApi({ config: configOn(redis.url), apiKeys: API_KEYS, port: 0 });
    closers.push(() => api.close());
    const headers = { authorization: `Bearer ${KEY}` };
    const post = (text: string) =>
      fetch(`${api.url}/v1/jobs`, {
        method: 'POST',
        headers: { ...headers, 'content-type': 'application/json' },
        body: JSON.stringify({ request: message(text) }),
      });

    // Served before the outage: the queue is registered, the scripts loaded.
    const before = await post('before');
    expect(before.status).toBe(202);
    const { id } = (await before.json()) as { id: string };

    await redis.kill();
    const during = await post('during');
    expect(during.status).toBe(503);
    expect(during.headers.get('retry-after')).toBe('5');
    expect(((await during.json()) as { error: { code: string } }).error.code).toBe(
      'redis_unavailable',
    );
    const get = await fetch(`${api.url}/v1/jobs/${id}`, { headers });
    expect(get.status).toBe(503);
    const del = await fetch(`${api.url}/v1/jobs/${id}`, { method: 'DELETE', headers });
    expect(del.status).toBe(503);
    // The drop-in Messages API answers as the provider does when it is overloaded.
    const gateway = await fetch(`${api.url}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': KEY, 'content-type': 'application/json', ...API_VERSION },
      body: JSON.stringify(message('during')),
    });
    expect(gateway.status).toBe(529);
    expect(gateway.headers.get('retry-after')).toBe('5');
    expect(((await gateway.json()) as { error: { type: string } }).error.type).toBe(
      'overloaded_error',
    );

    // Back from its append-only file: the same server accepts jobs, and the first job is there.
    await redis.restart();
    await until(async () => (await post('after')).status === 202, 30_000, 200);
    const again = await fetch(`${api.url}/v1/jobs/${id}`, { headers });
    expect(again.status).toBe(200);
    expect(((await again.json()) as { state: string }).state).toBe('waiting');
  }, 90_000);

  it("rejects every call of serve's producer with RedisUnavailableError while Redis is down, and no refused call runs later", async () => {
    redis = await startAofRedis();
    const api = await startHttpApi({ config: configOn(redis.url), apiKeys: API_KEYS, port: 0 });
    closers.push(() => api.close());
    const producer: Producer = api.producer;
    const id = await producer.enqueue(message('before'));

    await redis.kill();
    const killedAt = Date.now();
    const calls: [string, () => Promise<unknown>][] = [
      ['enqueue', () => producer.enqueue(message('during'))],
      ['enqueueMany', () => producer.enqueueMany([message('a'), message('b')])],
      [
        'enqueueMapReduce',
        () => producer.enqueueMapReduce({ parts: [message('p')], combine: message('c') }),
      ],
      ['status', () => producer.status(id)],
      ['cancel', () => producer.cancel(id)],
    ];
    for (const [name, call] of calls) {
      const err = await call().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err, name).toBeInstanceOf(RedisUnavailableError);
      expect((err as RedisUnavailableError).message, name).toContain(redis.url);
    }

    // Long enough down for a command held in an offline queue to outlive the 5 s deadline.
    await until(
      async () => {
        await producer.cancel(id).catch(() => {});
        return Date.now() - killedAt > 8_000;
      },
      30_000,
      100,
    );
    await redis.restart();
    await until(
      () =>
        producer.enqueue(message('after')).then(
          () => true,
          () => false,
        ),
      30_000,
      200,
    );
    // A cancel refused while Redis was down did not take the job out of the queue afterwards.
    expect((await producer.status(id))?.state).toBe('waiting');
  }, 90_000);
});
