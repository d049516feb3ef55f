/**
 * Every 5xx of `llmq serve` is logged once with its request id, and every job-API error body
 * carries that id (the `request-id` header too), so a user quoting it finds the line.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HttpApi } from '../producer/http/server.ts';
import { sdkFor, startGateway, TENANT_KEYS } from './fixtures/gateway.ts';
import { bullKey, openPool, type Pool } from './fixtures/worker-harness.ts';

let pool: Pool;
let api: HttpApi;
const lines: { level: string; message: string; fields: Record<string, unknown> }[] = [];
const sink =
  (level: string) =>
  (message: string, fields: Record<string, unknown> = {}) =>
    lines.push({ level, message, fields });

beforeAll(async () => {
  pool = await openPool('srverr');
  api = await startGateway(pool, {}, { logger: { warn: sink('warn'), error: sink('error') } });
});
afterAll(async () => {
  await api?.close();
  await pool?.cleanup();
});

const get = async (path: string, key: string = TENANT_KEYS.acme) => {
  const res = await fetch(`${api.url}${path}`, { headers: { authorization: `Bearer ${key}` } });
  // biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by tests
  return { status: res.status, id: res.headers.get('request-id'), body: (await res.json()) as any };
};

describe('request ids and 5xx logs', () => {
  it('every job-API error body carries the request id of its answer', async () => {
    for (const [path, key, status] of [
      ['/v1/jobs/nope', TENANT_KEYS.acme, 404],
      ['/v1/jobs/nope', 'sk-wrong-key-000', 401],
      ['/v1/nowhere', TENANT_KEYS.acme, 404],
    ] as const) {
      const r = await get(path, key);
      expect(r.status).toBe(status);
      expect(r.id).toMatch(/^req_llmq_[0-9a-f]{24}$/);
      expect(r.body.request_id).toBe(r.id);
    }
    expect(lines).toEqual([]);
  });

  it('a 500 is logged once, with the request id its body gives, and the error behind it', async () => {
    // A job whose data is not JSON (written behind llmq's back): reading it fails.
    await pool.redis.hset(bullKey(pool.names, 'broken'), {
      name: 'llm',
      data: '{not json',
      opts: '{}',
    });
    await pool.redis.rpush(bullKey(pool.names, 'wait'), 'broken');
    const r = await get('/v1/jobs/broken');
    expect(r.status, JSON.stringify(r.body)).toBe(500);
    expect(r.body.error).toEqual({ code: 'internal_error', message: 'internal error' });
    expect(r.body.request_id).toBe(r.id);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      level: 'error',
      message: 'answered 500',
      fields: { request_id: r.id, method: 'GET', route: '/v1/jobs/:id', status: 500 },
    });
    expect(String(lines[0]!.fields['error'])).toMatch(/JSON/);
    expect(JSON.stringify(lines)).not.toContain(TENANT_KEYS.acme);
  });

  it("the gateway's 5xx is logged by the request id its error body gives", async () => {
    lines.length = 0;
    // No worker and a wait of 0.2 s: the call is cancelled and answered 529.
    const quick = await startGateway(
      pool,
      {},
      {
        logger: { warn: sink('warn'), error: sink('error') },
        gateway: { maxWaitMs: 200 },
      },
    );
    try {
      const err = (await sdkFor(quick)
        .messages.create({
          model: 'claude-test-1',
          max_tokens: 5,
          messages: [{ role: 'user', content: 'hi' }],
        })
        .catch((e: unknown) => e)) as { status: number; requestID: string };
      expect(err.status).toBe(529);
      expect(lines).toHaveLength(1);
      expect(lines[0]!.fields).toMatchObject({ request_id: err.requestID, status: 529 });
    } finally {
      await quick.close();
    }
  });
});
