import Anthropic from '@anthropic-ai/sdk';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type MockAnthropicHandle, startMockAnthropic } from '../testing/mock-anthropic/index.ts';
import { until } from './helpers.ts';

let mock: MockAnthropicHandle;
let client: Anthropic;

beforeEach(async () => {
  mock = await startMockAnthropic();
  mock.batches.setOptions({ processingMs: 100 });
  client = new Anthropic({ apiKey: 'test', baseURL: mock.url, maxRetries: 0 });
});
afterEach(() => mock.close());

const params = (text: string) => ({
  model: 'claude-haiku-4-5',
  max_tokens: 20,
  messages: [{ role: 'user' as const, content: text }],
});

async function ended(id: string) {
  let batch = await client.messages.batches.retrieve(id);
  await until(async () => {
    batch = await client.messages.batches.retrieve(id);
    return batch.processing_status === 'ended';
  });
  return batch;
}

describe('mock Message Batches through the SDK', () => {
  it('processes a batch, then streams results in an order unlike the requests', async () => {
    const ids = Array.from({ length: 8 }, (_, i) => `job-${i}`);
    const created = await client.messages.batches.create({
      requests: ids.map((custom_id) => ({ custom_id, params: params(`doc ${custom_id}`) })),
    });
    expect(created.processing_status).toBe('in_progress');
    expect(created.request_counts.processing).toBe(8);
    expect(created.results_url).toBeNull();
    const batch = await ended(created.id);
    expect(batch.request_counts).toMatchObject({ succeeded: 8, processing: 0 });
    const seen: string[] = [];
    for await (const item of await client.messages.batches.results(created.id)) {
      seen.push(item.custom_id);
      expect(item.result.type).toBe('succeeded');
      if (item.result.type === 'succeeded')
        expect(item.result.message.usage.output_tokens).toBeGreaterThan(0);
    }
    expect([...seen].sort()).toEqual([...ids].sort());
    expect(seen).not.toEqual(ids);
    const listed = [];
    for await (const b of client.messages.batches.list()) listed.push(b.id);
    expect(listed).toEqual([created.id]);
    expect(mock.batches.stats()).toMatchObject({ created: 1, items: 8, resultsFetched: 1 });
  });

  it('injects an errored item and an expired batch', async () => {
    mock.batches.setFaults({ erroredItems: 1, expiredBatches: 1 });
    const created = await client.messages.batches.create({
      requests: ['a', 'b', 'c', 'd'].map((custom_id) => ({ custom_id, params: params(custom_id) })),
    });
    const batch = await ended(created.id);
    expect(batch.request_counts).toMatchObject({ succeeded: 1, errored: 1, expired: 2 });
    const byId = new Map<string, string>();
    for await (const item of await client.messages.batches.results(created.id))
      byId.set(item.custom_id, item.result.type);
    expect(byId).toEqual(
      new Map([
        ['a', 'errored'],
        ['b', 'succeeded'],
        ['c', 'expired'],
        ['d', 'expired'],
      ]),
    );
  });

  it('cancels a batch: its items come back canceled', async () => {
    mock.batches.setOptions({ processingMs: 60_000 });
    const created = await client.messages.batches.create({
      requests: [{ custom_id: 'x', params: params('x') }],
    });
    const canceling = await client.messages.batches.cancel(created.id);
    expect(canceling.processing_status).toBe('canceling');
    const batch = await ended(created.id);
    expect(batch.request_counts.canceled).toBe(1);
  });

  it('refuses what the Batches API refuses: streaming, too many requests, duplicate ids', async () => {
    mock.batches.setOptions({ maxRequests: 2 });
    const refuse = (requests: unknown[]) =>
      client.messages.batches.create({ requests } as never).then(
        () => 'accepted',
        (e: InstanceType<typeof Anthropic.APIError>) =>
          `${e.status} ${(e.error as { error: { message: string } }).error.message}`,
      );
    expect(await refuse([{ custom_id: 'a', params: { ...params('a'), stream: true } }])).toMatch(
      /^400 .*stream/,
    );
    expect(
      await refuse(['a', 'b', 'c'].map((custom_id) => ({ custom_id, params: params(custom_id) }))),
    ).toMatch(/^400 .*at most 2/);
    expect(
      await refuse(['a', 'a'].map((custom_id) => ({ custom_id, params: params(custom_id) }))),
    ).toMatch(/^400 .*duplicate/);
    expect(mock.batches.stats().created).toBe(0);
  });
});
