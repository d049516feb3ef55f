/**
 * A connection that fails before the request is sent (nobody listening) cannot have been
 * charged: its budget comes back, so a dead endpoint does not fill its window with calls that
 * never reached it, and nothing answering there opens its breaker at once. A connection dropped
 * after the request was sent may have been charged, and counts as one failure of five.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import type { QueueNames } from '../shared/keys.ts';
import { CircuitBreaker } from '../worker/breaker.ts';
import { classifyProviderError } from '../worker/classify.ts';
import { eachTestRedis } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
eachTestRedis('conn', (r, n) => {
  redis = r;
  names = n;
});

const ask = {
  model: 'claude-sonnet-4-5',
  max_tokens: 10,
  messages: [{ role: 'user' as const, content: 'hi' }],
};

async function listening(server: Server): Promise<number> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return (server.address() as AddressInfo).port;
}

/** What the real SDK throws for a call to `port`. */
async function errorFrom(port: number): Promise<unknown> {
  // A fresh client: no kept-alive socket from an earlier call.
  const client = new Anthropic({
    apiKey: 'sk-test',
    baseURL: `http://127.0.0.1:${port}`,
    maxRetries: 0,
  });
  return client.messages.create(ask).then(
    () => undefined,
    (e: unknown) => e,
  );
}

describe('a failed connection', () => {
  it('refused (nothing listening): not charged, the reason says it was not sent', async () => {
    const server = createServer();
    const port = await listening(server);
    server.close();
    await once(server, 'close');
    const c = classifyProviderError(await errorFrom(port));
    expect(c).toMatchObject({ kind: 'retryable', maybeCharged: false, transient: true });
    expect(c.reason).toMatch(/ECONNREFUSED, the request was not sent/);
  });

  it('dropped after the request was sent: may have been charged', async () => {
    const server = createServer((req) => req.socket.destroy());
    const port = await listening(server);
    try {
      const c = classifyProviderError(await errorFrom(port));
      expect(c).toMatchObject({ kind: 'retryable', maybeCharged: true, transient: true });
    } finally {
      server.close();
    }
  });

  it('refused: the breaker opens on the first; dropped: it takes five', async () => {
    const server = createServer((req) => req.socket.destroy());
    const port = await listening(server);
    const dropped = classifyProviderError(await errorFrom(port));
    server.close();
    await once(server, 'close');
    const refused = classifyProviderError(await errorFrom(port));
    const breaker = new CircuitBreaker(redis, names, { threshold: 5, cacheMs: 0 });
    expect((await breaker.recordFailure(dropped.unreachable === true)).opened).toBe(false);
    expect((await breaker.check()).allowed).toBe(true);
    expect((await breaker.recordFailure(refused.unreachable === true)).opened).toBe(true);
    expect((await breaker.check()).allowed).toBe(false);
  });

  it('dropped while a streamed answer was read: may have been charged, a transient failure', async () => {
    // The answer begins, then the server goes away mid-stream.
    const server = createServer((_, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('event: ping\ndata: {"type": "ping"}\n\n', () => res.socket?.destroy());
    });
    const port = await listening(server);
    const client = new Anthropic({
      apiKey: 'sk-test',
      baseURL: `http://127.0.0.1:${port}`,
      maxRetries: 0,
    });
    try {
      const err = await (async () => {
        for await (const _ of await client.messages.create({ ...ask, stream: true })) void _;
      })().then(
        () => undefined,
        (e: unknown) => e,
      );
      const c = classifyProviderError(err);
      expect(c).toMatchObject({ kind: 'retryable', maybeCharged: true, transient: true });
      expect(c.reason).toMatch(/connection dropped during the response/);
    } finally {
      server.close();
    }
  });
});
