import { request as httpRequest } from 'node:http';
import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HttpApi } from '../producer/http/server.ts';
import { IdempotencyConflictError, RequestValidationError } from '../shared/errors.ts';
import { API_VERSION, sdkFor, startGateway, TENANT_KEYS } from './fixtures/gateway.ts';
import { openPool, type Pool, request } from './fixtures/worker-harness.ts';

let pool: Pool;
let api: HttpApi;
let to: { host: string; port: number };

beforeAll(async () => {
  pool = await openPool('idem', { latencyMs: 5 });
  await pool.worker({ concurrency: 2 });
  api = await startGateway(pool);
  const url = new URL(api.url);
  to = { host: url.hostname, port: Number(url.port) };
});
afterAll(async () => {
  await api?.close();
  await pool?.cleanup();
});

/**
 * A POST written byte for byte: header values as Latin-1 (one byte a character) and the body
 * as given, so a key may hold bytes that are not UTF-8.
 */
function postBytes(path: string, headers: Record<string, string>, body: Buffer) {
  // biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by tests
  return new Promise<{ status: number; body: any }>((resolve, reject) => {
    const req = httpRequest({ ...to, method: 'POST', path, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          body: JSON.parse(Buffer.concat(chunks).toString()),
        }),
      );
    });
    req.on('error', reject);
    req.end(body);
  });
}
const postJob = (body: string | Buffer) =>
  postBytes(
    '/v1/jobs',
    { 'content-type': 'application/json', authorization: `Bearer ${TENANT_KEYS.acme}` },
    Buffer.from(body),
  );
const jobBody = (text: string, key: string) =>
  JSON.stringify({ request: request(text, 20), idempotency_key: key });
const jobCount = async () => Object.values(await pool.counts()).reduce((a, b) => a + b, 0);

describe('idempotency keys on the job API', () => {
  it('the same key with the same request is the same job; with another request a 409', async () => {
    const first = await postJob(jobBody('one', 'order-1'));
    expect(first).toMatchObject({ status: 202, body: { created: true } });
    const again = await postJob(jobBody('one', 'order-1'));
    expect(again.body).toEqual({ id: first.body.id, created: false });
    const before = await jobCount();
    const other = await postJob(jobBody('two', 'order-1'));
    expect(other.status).toBe(409);
    expect(other.body.error).toMatchObject({
      code: 'idempotency_conflict',
      field: 'idempotency_key',
    });
    expect(other.body.error.message).toContain(first.body.id);
    expect(await jobCount()).toBe(before);
  });

  it('keys that are not valid UTF-8 are refused with 400, never merged into one job', async () => {
    const before = await jobCount();
    // Bytes written by hand: "zz" then a byte that starts or continues no UTF-8 character.
    for (const bad of ['zz\xfe', 'zz\xc0', 'zz\x80', 'k\xff']) {
      const [before, after] = jobBody('bytes', 'KEY').split('KEY');
      const body = Buffer.concat([
        Buffer.from(before!),
        Buffer.from(bad, 'latin1'),
        Buffer.from(after!),
      ]);
      const r = await postJob(body);
      expect(r.status, JSON.stringify(bad)).toBe(400);
      expect(r.body.error).toMatchObject({ code: 'invalid_request', field: 'idempotency_key' });
    }
    // What invalid UTF-8 decodes to is refused as well, so it cannot stand for those bytes.
    const replaced = await postJob(jobBody('bytes', 'k\ufffd'));
    expect(replaced.status).toBe(400);
    expect(await jobCount()).toBe(before);
  });

  it('the library throws typed errors for both', async () => {
    await pool.producer.enqueue(request('three', 20), { idempotencyKey: 'lib-1' });
    await expect(
      pool.producer.enqueue(request('four', 20), { idempotencyKey: 'lib-1' }),
    ).rejects.toThrow(IdempotencyConflictError);
    await expect(
      pool.producer.enqueue(request('four', 20), { idempotencyKey: 'k\ufffd' }),
    ).rejects.toThrow(RequestValidationError);
    // enqueueMany: a used key, or one key twice in a call, with another request.
    const reqs = [request('m1', 20), request('m2', 20)];
    const ids = await pool.producer.enqueueMany(reqs, { idempotencyKeys: ['m-1', 'm-2'] });
    expect(await pool.producer.enqueueMany(reqs, { idempotencyKeys: ['m-1', 'm-2'] })).toEqual(ids);
    const before = await jobCount();
    await expect(
      pool.producer.enqueueMany([request('m3', 20), request('other', 20)], {
        idempotencyKeys: ['m-3', 'm-2'],
      }),
    ).rejects.toThrow(IdempotencyConflictError);
    await expect(
      pool.producer.enqueueMany([request('m4', 20), request('m5', 20)], {
        idempotencyKeys: ['m-4', 'm-4'],
      }),
    ).rejects.toThrow(IdempotencyConflictError);
    expect(await jobCount()).toBe(before);
    // A map-reduce: its combine job and its parts.
    const flow = (part: string) => ({ parts: [request(part, 20)], combine: request('join', 20) });
    const mr = await pool.producer.enqueueMapReduce(flow('p1'), { idempotencyKey: 'mr-1' });
    expect(
      (await pool.producer.enqueueMapReduce(flow('p1'), { idempotencyKey: 'mr-1' })).created,
    ).toBe(false);
    await expect(
      pool.producer.enqueueMapReduce(flow('p2'), { idempotencyKey: 'mr-1' }),
    ).rejects.toThrow(new IdempotencyConflictError(mr.partIds[0]!).message);
    // Jobs bound for Message Batches too.
    const batches = { idempotencyKey: 'lib-2', via: 'batches' as const };
    const first = await pool.producer.enqueueJob(request('five', 20), batches);
    expect(await pool.producer.enqueueJob(request('five', 20), batches)).toEqual({
      id: first.id,
      created: false,
    });
    await expect(pool.producer.enqueueJob(request('six', 20), batches)).rejects.toThrow(
      IdempotencyConflictError,
    );
  });
});

describe('idempotency keys through the gateway, with the official SDK', () => {
  it('another request under a used key is a ConflictError, never the first answer', async () => {
    const sdk = sdkFor(api, TENANT_KEYS.acme, 2);
    const headers = { 'idempotency-key': 'chat-1' };
    const one = await sdk.messages.create(request('one', 30) as never, { headers });
    const oneAgain = await sdk.messages.create(request('one', 30) as never, { headers });
    expect(oneAgain.content).toEqual(one.content);
    const before = await jobCount();
    let caught: unknown;
    try {
      await sdk.messages.create(request('two', 30) as never, { headers });
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(Anthropic.ConflictError);
    const e = caught as InstanceType<typeof Anthropic.ConflictError>;
    expect(e.status).toBe(409);
    expect(e.error).toMatchObject({ type: 'error', error: { type: 'conflict_error' } });
    expect(JSON.stringify(e.error)).not.toContain(JSON.stringify(one.content));
    expect(await jobCount()).toBe(before);
  });

  it('an idempotency-key header that is not UTF-8 is the API 400; UTF-8 is taken', async () => {
    const utf8 = await postBytes(
      '/v1/messages',
      {
        'content-type': 'application/json',
        'x-api-key': TENANT_KEYS.acme,
        ...API_VERSION,
        'idempotency-key': Buffer.from('clé-1').toString('latin1'),
      },
      Buffer.from(JSON.stringify(request('accents', 20))),
    );
    expect(utf8.status).toBe(200);
    for (const bad of ['zz\xfe', 'zz\xc0', 'zz\x80']) {
      const r = await postBytes(
        '/v1/messages',
        {
          'content-type': 'application/json',
          'x-api-key': TENANT_KEYS.acme,
          ...API_VERSION,
          'idempotency-key': bad,
        },
        Buffer.from(JSON.stringify(request('bytes', 20))),
      );
      expect(r.status, JSON.stringify(bad)).toBe(400);
      expect(r.body).toMatchObject({
        type: 'error',
        error: {
          type: 'invalid_request_error',
          message: expect.stringMatching(/^idempotency-key: must be valid UTF-8/),
        },
      });
    }
  });
});
