/** The mock's `anthropic-ratelimit-*-remaining` readings: exact, or rounded as the API rounds them. */
import Anthropic from '@anthropic-ai/sdk';
import { describe, expect, it } from 'vitest';
import type { MockAnthropicHandle } from '../testing/mock-anthropic/index.ts';
import { eachTestMocks } from './fixtures/mock-servers.ts';

const start = eachTestMocks();

const limits = { requests: 50, inputTokens: 30_000, outputTokens: 10_000, tokens: 40_000 };

async function call(mock: MockAnthropicHandle, maxTokens: number) {
  const client = new Anthropic({ apiKey: 'k', baseURL: mock.url, maxRetries: 0 });
  const { response } = await client.messages
    .create({
      model: 'claude-mock-1',
      max_tokens: maxTokens,
      messages: [{ role: 'user', content: `Tell me about the number ${maxTokens}.` }],
    })
    .withResponse();
  const remaining = (name: string) =>
    Number(response.headers.get(`anthropic-ratelimit-${name}-remaining`));
  return {
    requests: remaining('requests'),
    input: remaining('input-tokens'),
    output: remaining('output-tokens'),
    tokens: remaining('tokens'),
  };
}

describe('rate-limit readings', () => {
  it('rounds token -remaining to the nearest multiple of roundReadings; requests stay exact', async () => {
    const mock = await start({ limits, roundReadings: 1_000 });
    const seen: number[] = [];
    for (const [n, maxTokens] of [1_200, 2_600, 333, 4_100].entries()) {
      const reading = await call(mock, maxTokens);
      const { spent } = mock.stats();
      expect(reading.requests).toBe(50 - (n + 1));
      expect(reading.input).toBe(Math.round((30_000 - spent.input_tokens) / 1_000) * 1_000);
      expect(reading.output).toBe(Math.round((10_000 - spent.output_tokens) / 1_000) * 1_000);
      expect(reading.tokens).toBe(Math.round((40_000 - spent.tokens) / 1_000) * 1_000);
      seen.push(reading.tokens);
    }
    // What a client sees moves in whole thousands, and hides what is below them.
    expect(seen).toEqual([39_000, 36_000, 36_000, 32_000]);
  });

  it('sends them exact by default', async () => {
    const mock = await start({ limits });
    const reading = await call(mock, 1_234);
    const { spent } = mock.stats();
    expect(reading.tokens).toBe(40_000 - spent.tokens);
    expect(reading.output).toBe(10_000 - 1_234);
    expect(reading.input).toBe(30_000 - spent.input_tokens);
  });
});
