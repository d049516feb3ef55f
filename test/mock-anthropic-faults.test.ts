import Anthropic, { APIConnectionError, APIError } from '@anthropic-ai/sdk';
import { describe, expect, it } from 'vitest';
import type { MockAnthropicHandle } from '../testing/mock-anthropic/index.ts';
import { eachTestMocks } from './fixtures/mock-servers.ts';

const start = eachTestMocks();

function sdk(mock: MockAnthropicHandle): Anthropic {
  return new Anthropic({ apiKey: 'test-key', baseURL: mock.url, maxRetries: 0 });
}

const params = {
  model: 'claude-mock-1',
  max_tokens: 64,
  messages: [{ role: 'user' as const, content: 'Tell me about token buckets.' }],
};

/** What the client saw: "ok", an HTTP status, or "connection" for a dropped socket. */
async function outcome(call: Promise<unknown>): Promise<string> {
  try {
    await call;
    return 'ok';
  } catch (error) {
    if (error instanceof APIConnectionError) return 'connection';
    if (error instanceof APIError) return String(error.status ?? `stream:${error.type}`);
    throw error;
  }
}

async function sequentially(count: number, call: () => Promise<unknown>): Promise<string[]> {
  const seen: string[] = [];
  for (let i = 0; i < count; i++) seen.push(await outcome(call()));
  return seen;
}

function tally(outcomes: string[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const seen of outcomes) counts[seen] = (counts[seen] ?? 0) + 1;
  return counts;
}

describe('mock Anthropic faults', () => {
  it('injects 529, 500 and dropped connections at the configured rates, as the SDK sees them', async () => {
    const mock = await start({ faults: { overloaded: 0.2, serverError: 0.1, drop: 0.1 } });
    const client = sdk(mock);
    const n = 400;
    const counts = tally(await sequentially(n, () => client.messages.create(params)));

    // Binomial spread at n = 400 is at most 10 (p = 0.2); allow about 3.5 of it.
    expect(Math.abs((counts['529'] ?? 0) - 0.2 * n)).toBeLessThanOrEqual(35);
    expect(Math.abs((counts['500'] ?? 0) - 0.1 * n)).toBeLessThanOrEqual(25);
    expect(Math.abs((counts['connection'] ?? 0) - 0.1 * n)).toBeLessThanOrEqual(25);
    expect(Math.abs((counts['ok'] ?? 0) - 0.6 * n)).toBeLessThanOrEqual(40);

    const stats = mock.stats();
    expect(stats.faults).toEqual({
      overloaded: counts['529'],
      serverError: counts['500'],
      drop: counts['connection'],
      hang: 0,
      midStreamError: 0,
      stall: 0,
    });
    expect(stats.responses).toEqual({
      '200': counts['ok'],
      '529': counts['529'],
      '500': counts['500'],
      dropped: counts['connection'],
    });
    // Faulted requests were refused at the door: only the 200s were charged.
    expect(stats).toMatchObject({ attempts: n, admitted: counts['ok'] });
  });

  it('answers faults with the real error bodies: 529 Overloaded and 500 api_error', async () => {
    const mock = await start({ faults: { overloaded: 1 } });
    const overloaded = await sdk(mock)
      .messages.create(params)
      .catch((caught: unknown) => caught);
    expect(overloaded).toBeInstanceOf(Anthropic.InternalServerError);
    expect((overloaded as APIError).error).toMatchObject({
      type: 'error',
      error: { type: 'overloaded_error', message: 'Overloaded' },
      request_id: expect.stringMatching(/^req_/),
    });
    mock.setFaults({ serverError: 1 });
    await expect(sdk(mock).messages.create(params)).rejects.toMatchObject({
      status: 500,
      type: 'api_error',
    });
  });

  it('replays the same faults from the same seed after a reset', async () => {
    const mock = await start({ faults: { overloaded: 0.3, drop: 0.2 }, seed: 42 });
    const client = sdk(mock);
    const first = await sequentially(40, () => client.messages.create(params));
    mock.reset();
    expect(mock.stats().attempts).toBe(0);
    const replay = await sequentially(40, () => client.messages.create(params));
    expect(replay).toEqual(first);

    const otherSeed = await start({ faults: { overloaded: 0.3, drop: 0.2 }, seed: 43 });
    const other = await sequentially(40, () => sdk(otherSeed).messages.create(params));
    expect(other).not.toEqual(first);
  });

  it('fails a stream midway with an error event the SDK raises as an APIError, after some text', async () => {
    const mock = await start({
      faults: { midStreamError: 1 },
      outputShare: 1,
      outputAccounting: 'actual',
      limits: { outputTokens: 10_000 },
    });
    const stream = sdk(mock).messages.stream({ ...params, max_tokens: 400 });
    let text = '';
    stream.on('text', (delta) => {
      text += delta;
    });
    const error = await stream.finalMessage().catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(APIError);
    expect(error).not.toBeInstanceOf(APIConnectionError);
    expect((error as APIError).status).toBeUndefined();
    expect((error as APIError).type).toBe('overloaded_error');
    expect(text.length).toBeGreaterThan(0);

    const stats = mock.stats();
    expect(stats).toMatchObject({
      admitted: 1,
      responses: { '200': 1 },
      faults: { midStreamError: 1 },
    });
    // Admitted, so charged; 'actual' gave back what was never sent.
    expect(stats.spent.output_tokens).toBeGreaterThan(0);
    expect(stats.spent.output_tokens).toBeLessThan(400);
  });

  it('fails streams midway at the configured rate, and never a plain answer', async () => {
    const mock = await start({ faults: { midStreamError: 0.3 } });
    const client = sdk(mock);
    const n = 200;
    const streamed = tally(
      await sequentially(n, () => client.messages.stream(params).finalMessage()),
    );
    expect(Math.abs((streamed['stream:overloaded_error'] ?? 0) - 0.3 * n)).toBeLessThanOrEqual(25);
    expect(mock.stats().faults.midStreamError).toBe(streamed['stream:overloaded_error']);

    const plain = tally(await sequentially(50, () => client.messages.create(params)));
    expect(plain).toEqual({ ok: 50 });
  });

  it('drops the connection so the SDK sees an APIConnectionError', async () => {
    const mock = await start({ faults: { drop: 1 } });
    const error = await sdk(mock)
      .messages.create(params)
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(APIConnectionError);
    expect(mock.stats()).toMatchObject({ responses: { dropped: 1 }, admitted: 0 });
  });

  it('hangs: reads the request and sends nothing, not even headers, until the client gives up', async () => {
    const mock = await start({ faults: { hang: 1 } });
    const client = new Anthropic({ apiKey: 'k', baseURL: mock.url, maxRetries: 0, timeout: 300 });
    for (const call of [
      () => client.messages.create(params),
      () => client.messages.stream(params).finalMessage(),
    ])
      await expect(call()).rejects.toBeInstanceOf(Anthropic.APIConnectionTimeoutError);
    // Refused at the door, as a load balancer that never forwarded it: nothing charged.
    expect(mock.stats()).toMatchObject({
      attempts: 2,
      admitted: 0,
      responses: { hung: 2 },
      faults: { hang: 2 },
    });
    mock.setFaults({});
    await expect(sdk(mock).messages.create(params)).resolves.toMatchObject({ type: 'message' });
  });

  it('stalls a stream midway: half the deltas, then silence on an open connection', async () => {
    // 64 tokens: one delta each, so the stall comes after 32.
    const mock = await start({ faults: { stall: 1 }, outputShare: 1 });
    const response = await fetch(`${mock.url}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': 'k', 'content-type': 'application/json' },
      body: JSON.stringify({ ...params, stream: true }),
    });
    const reader = response.body!.getReader();
    let text = '';
    while ((text.match(/event: content_block_delta/g) ?? []).length < 32) {
      const { value } = await reader.read();
      text += new TextDecoder().decode(value);
    }
    // Closing the server is the only thing that ends it: no more deltas, no message_stop.
    const [rest] = await Promise.all([
      (async () => {
        let more = '';
        for (;;) {
          const r = await reader.read().catch(() => ({ done: true, value: undefined }));
          if (r.done) return more;
          more += new TextDecoder().decode(r.value);
        }
      })(),
      mock.close(),
    ]);
    const all = text + rest;
    expect((all.match(/event: content_block_delta/g) ?? []).length).toBe(32);
    expect(all).not.toContain('message_stop');
    expect(all).not.toContain('event: error');
    expect(mock.stats()).toMatchObject({ admitted: 1, faults: { stall: 1, midStreamError: 0 } });
  });

  it('goes through an outage and recovers when the faults are switched off at runtime', async () => {
    const mock = await start();
    const client = sdk(mock);
    mock.setFaults({ overloaded: 1 });
    expect(tally(await sequentially(5, () => client.messages.create(params)))).toEqual({
      '529': 5,
    });
    mock.setFaults({});
    expect(tally(await sequentially(5, () => client.messages.create(params)))).toEqual({ ok: 5 });
    expect(() => mock.setFaults({ overloaded: 0.7, drop: 0.5 })).toThrow(
      'faults.overloaded + faults.serverError + faults.drop + faults.hang must be at most 1, got 1.2',
    );
  });
});
