import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HttpApi } from '../producer/http/server.ts';
import { sdkFor, startGateway, TENANT_KEYS } from './fixtures/gateway.ts';
import { sendRaw } from './fixtures/raw-http.ts';
import { openPool, type Pool, request } from './fixtures/worker-harness.ts';

const WRONG = 'sk-guess-DO-NOT-LOG-0451';

let pool: Pool;
let a: HttpApi;
let b: HttpApi;
const logged: string[] = [];

/** Two `llmq serve` on one queue and one Redis, as behind a load balancer. */
async function twoServers(on: Pool): Promise<[HttpApi, HttpApi]> {
  const more = { authThrottle: { baseDelayMs: 60_000, log: (l: string) => logged.push(l) } };
  return [await startGateway(on, {}, more), await startGateway(on, {}, more)];
}

beforeAll(async () => {
  pool = await openPool('authshare');
  [a, b] = await twoServers(pool);
});
afterAll(async () => {
  await Promise.all([a?.close(), b?.close()]);
  await pool?.cleanup();
});

const jobs = (api: HttpApi, key: string) =>
  sendRaw({ host: '127.0.0.1', port: Number(new URL(api.url).port) }, 'GET', '/v1/jobs/x', {
    authorization: `Bearer ${key}`,
  });
const status = (call: Promise<unknown>) =>
  call.then(
    () => 200,
    (e: unknown) => (e as InstanceType<typeof Anthropic.APIError>).status,
  );

describe('failed keys are counted per address on every route of every server', () => {
  it('after exactly 5 wrong keys across two servers and three routes, the address gets 429', async () => {
    const wrong = [
      () => status(sdkFor(a, WRONG).messages.create(request() as never)),
      async () => (await jobs(b, WRONG)).status,
      () => status(sdkFor(b, WRONG).messages.countTokens({ model: 'm', messages: [] })),
      () => status(sdkFor(a, WRONG).models.list()),
      async () => (await jobs(a, WRONG)).status,
    ];
    const codes: (number | undefined)[] = [];
    for (const send of wrong) codes.push(await send());
    expect(codes).toEqual([401, 401, 401, 401, 401]);

    // The sixth request is refused on either server, whatever key it sends (the right one too).
    const refused = await sdkFor(b, TENANT_KEYS.acme)
      .messages.create(request() as never)
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(Anthropic.RateLimitError);
    const e = refused as InstanceType<typeof Anthropic.RateLimitError>;
    expect(e.type).toBe('rate_limit_error');
    expect(Number(e.headers?.get('retry-after'))).toBeGreaterThanOrEqual(59);
    expect(e.headers?.get('request-id')).toMatch(/^req_/);
    const api = await jobs(a, TENANT_KEYS.acme);
    expect(api.status).toBe(429);
    expect(JSON.parse(api.text).error.code).toBe('too_many_auth_failures');
    expect(logged.join('\n')).toContain('5 failed authentications from 127.0.0.1');
    expect(logged.join('\n')).not.toContain(WRONG);
  });

  it('a request without a key does not count, and a right key in between clears nothing', async () => {
    // A prefix of its own: the count above refuses this address for a minute.
    const other = await openPool('authshare2');
    const [c, d] = await twoServers(other);
    try {
      for (let i = 0; i < 6; i++) {
        const r = await fetch(`${c.url}/v1/messages`, { method: 'POST' });
        expect(r.status).toBe(401);
      }
      // Rounds of 4 wrong keys and 1 good one: the fifth wrong key refuses the address.
      const codes: number[] = [];
      for (let round = 0; round < 3; round++) {
        for (let i = 0; i < 4; i++) codes.push((await jobs(i % 2 ? c : d, WRONG)).status);
        codes.push((await jobs(c, TENANT_KEYS.beta)).status);
      }
      expect(codes).toEqual([401, 401, 401, 401, 404, 401, ...Array(9).fill(429)]);
      expect((await jobs(d, TENANT_KEYS.beta)).status).toBe(429);
    } finally {
      await Promise.all([c.close(), d.close()]);
      await other.cleanup();
    }
  });
});
