import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { beforeAll, describe, expect, it } from 'vitest';
import { startDashboard } from '../dashboard/server.ts';
import { hashApiKey } from '../producer/http/api-keys.ts';
import { serveForFile } from './fixtures/http-api.ts';

const KEY = 'sk-limits-0123456789';

const served = serveForFile('limits', {
  apiKeys: `acme:${hashApiKey(KEY)}`,
  limits: { headersTimeoutMs: 500 },
  // Every client here is this machine: the throttle of guesses per address stays out of it.
  authThrottle: { maxFailures: 10_000 },
});
let port: number;
beforeAll(() => {
  port = Number(new URL(served.api.url).port);
});

/** A client that sends `head` and then nothing more; resolves what it read once the server closed it. */
async function holder(head: string): Promise<{ socket: Socket; closed: Promise<string> }> {
  const socket = connect(port, '127.0.0.1');
  await once(socket, 'connect');
  let read = '';
  socket.setEncoding('utf8');
  socket.on('data', (c: string) => {
    read += c;
  });
  socket.on('error', () => {});
  const closed = once(socket, 'close').then(() => read);
  socket.write(head);
  return { socket, closed };
}

const slowBody = (path: string, auth: string) =>
  `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n${auth}Content-Length: 1000000\r\n\r\n{"request":`;

const keyed = () =>
  fetch(`${served.api.url}/v1/jobs`, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      request: { model: 'claude-test', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] },
    }),
  });

describe('llmq serve under clients that hold connections', () => {
  it('unauthenticated slow bodies are answered 401 and closed unread; a keyed request goes through', async () => {
    const clients = await Promise.all(
      Array.from({ length: 150 }, (_, i) =>
        holder(
          i % 2 === 0
            ? slowBody('/v1/jobs', i % 4 === 0 ? '' : 'Authorization: Bearer sk-wrong\r\n')
            : slowBody('/v1/messages', 'x-api-key: sk-wrong\r\n'),
        ),
      ),
    );
    // Each is answered and the server closes the socket, though its body never came.
    const answers = await Promise.all(clients.map((c) => c.closed));
    for (const [i, text] of answers.entries()) {
      expect(text, `client ${i}`).toMatch(/^HTTP\/1\.1 401 /);
      expect(text.toLowerCase()).toContain('connection: close');
    }
    const res = await keyed();
    expect(res.status).toBe(202);
  });

  it('clients that never finish their headers, or send nothing, are closed by the header timeout', async () => {
    const clients = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        holder(i % 2 ? 'POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bea' : ''),
      ),
    );
    // Served while they hang.
    expect((await keyed()).status).toBe(202);
    const answers = await Promise.all(clients.map((c) => c.closed));
    for (const text of answers) expect(text).toMatch(/^(HTTP\/1\.1 408 |$)/);
  });
});

describe('the dashboard under clients that hold connections', () => {
  it('a write without credentials is answered 401 and closed before its body is read', async () => {
    const dashboard = await startDashboard({
      redis: served.redis,
      prefix: served.names.prefix,
      port: 0,
      auth: { token: 'dash-limits-token' },
      authThrottle: { freeFailures: 10_000 },
    });
    try {
      port = Number(new URL(dashboard.baseUrl).port);
      const clients = await Promise.all(
        Array.from({ length: 20 }, () =>
          holder(slowBody(`/api/queues/${served.names.queue}/add`, '')),
        ),
      );
      for (const text of await Promise.all(clients.map((c) => c.closed)))
        expect(text).toMatch(/^HTTP\/1\.1 401 /);
      const ok = await fetch(`${dashboard.baseUrl}/api/queues`, {
        headers: { authorization: 'Bearer dash-limits-token' },
      });
      expect(ok.status).toBe(200);
    } finally {
      port = Number(new URL(served.api.url).port);
      await dashboard.close();
    }
  });
});
