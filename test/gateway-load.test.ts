import type Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { HttpApi } from '../producer/http/server.ts';
import { sdkFor, startGateway, TENANT_KEYS } from './fixtures/gateway.ts';
import { openPool, type Pool } from './fixtures/worker-harness.ts';

const LIMIT = 4_000;
const WINDOW_MS = 10_000;

let pool: Pool;
let api: HttpApi;

beforeAll(async () => {
  // The published limit: 4,000 tokens per sliding 10 s window, `reserve` accounting.
  pool = await openPool('gwload', {
    windowMs: WINDOW_MS,
    limits: { tokens: LIMIT },
    algorithm: 'sliding',
    outputAccounting: 'reserve',
    latencyMs: 20,
  });
  await pool.worker({
    concurrency: 20,
    limiter: { windowMs: WINDOW_MS, limits: { tokens: LIMIT } },
  });
  api = await startGateway(pool, { tpm: String(LIMIT) });
});
afterAll(async () => {
  await api?.close();
  await pool?.cleanup();
});

it('200 concurrent SDK calls from three tenants are all answered, with no 429 anywhere', async () => {
  const tenants = Object.values(TENANT_KEYS);
  // No SDK retries: a 429 (or any error) reaching a caller fails the call.
  const clients = tenants.map((key) => sdkFor(api, key, 0));
  const calls = Array.from({ length: 200 }, (_, i) => {
    const params: Anthropic.MessageCreateParamsNonStreaming = {
      model: 'claude-test-1',
      max_tokens: 10,
      messages: [{ role: 'user', content: `Call ${i}: say hi.` }],
    };
    const client = clients[i % clients.length]!;
    return i % 4 === 0
      ? client.messages.stream(params).finalMessage()
      : client.messages.create(params);
  });
  const results = await Promise.allSettled(calls);
  const failed = results.filter((r) => r.status === 'rejected');
  expect(failed.map((r) => String((r as PromiseRejectedResult).reason)).slice(0, 3)).toEqual([]);
  for (const r of results) {
    expect((r as PromiseFulfilledResult<Anthropic.Message>).value.content.length).toBe(1);
  }
  const stats = pool.mock.stats();
  expect(stats.responses['429'] ?? 0).toBe(0);
  expect(stats.responses['200']).toBe(200);
  expect(stats.worstWindow.tokens).toBeLessThanOrEqual(LIMIT);
}, 120_000);
