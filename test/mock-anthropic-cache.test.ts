/** The mock's prompt cache, as the SDK sees it: breakpoints, usage, lifetime, limits. */
import Anthropic, { BadRequestError, RateLimitError } from '@anthropic-ai/sdk';
import { describe, expect, it } from 'vitest';
import { countMockTokens, type MockAnthropicHandle } from '../testing/mock-anthropic/index.ts';
import { eachTestMocks } from './fixtures/mock-servers.ts';
import { until } from './helpers.ts';

const start = eachTestMocks();
const ephemeral = { type: 'ephemeral' as const };

function sdk(mock: MockAnthropicHandle, apiKey = 'key-a'): Anthropic {
  return new Anthropic({ apiKey, baseURL: mock.url, maxRetries: 0 });
}

/** A system prompt of about `words` tokens (words of letters, a token each), one per `seed`. */
function longPrompt(words: number, seed = 0): string {
  const word = (n: number) =>
    (n % 17_576).toString(26).replace(/\d/g, (d) => 'qrstuvwxyz'[Number(d)]!);
  return Array.from({ length: words }, (_, i) => `k${word(i * 7 + seed)}`).join(' ');
}

/** A request with a cached system prompt of about `words` tokens and a short question. */
function cachedAsk(
  words: number,
  question = 'What is the first word?',
  model = 'claude-sonnet-4-5',
) {
  return {
    model,
    max_tokens: 20,
    system: [{ type: 'text' as const, text: longPrompt(words), cache_control: ephemeral }],
    messages: [{ role: 'user' as const, content: question }],
  };
}

/** The tokens of the system prompt's prefix (what a breakpoint on it caches). */
function prefixTokens(words: number): number {
  const whole = cachedAsk(words);
  return countMockTokens(whole) - countMockTokens({ ...whole, system: undefined }) + 3;
}

describe('prompt caching', () => {
  it('writes a long prefix once, then reads it, and usage reports the three fields', async () => {
    const mock = await start();
    const client = sdk(mock);
    const request = cachedAsk(3_000);
    const total = countMockTokens(request);
    const prefix = prefixTokens(3_000);
    expect(prefix).toBeGreaterThan(1_024);

    const first = await client.messages.create(request);
    expect(first.usage).toMatchObject({
      cache_creation_input_tokens: prefix,
      cache_read_input_tokens: 0,
      input_tokens: total - prefix,
      cache_creation: { ephemeral_5m_input_tokens: prefix, ephemeral_1h_input_tokens: 0 },
    });
    const second = await client.messages.create({
      ...request,
      messages: [{ role: 'user', content: 'And the last?' }],
    });
    expect(second.usage.cache_read_input_tokens).toBe(prefix);
    expect(second.usage.cache_creation_input_tokens).toBe(0);
    expect(second.usage.input_tokens).toBeLessThan(20);
    // count_tokens knows no cache: everything is input.
    expect((await client.messages.countTokens(request)).input_tokens).toBe(total);
    expect(mock.stats().cache).toEqual({
      writes: 1,
      reads: 1,
      creationInputTokens: prefix,
      readInputTokens: prefix,
    });
  });

  it('reports the cache fields in a stream, in message_start', async () => {
    const mock = await start();
    const client = sdk(mock);
    await client.messages.create(cachedAsk(2_000));
    const stream = client.messages.stream(cachedAsk(2_000, 'Again, streamed.'));
    const started = new Promise<Anthropic.Usage>((resolve) =>
      stream.on('streamEvent', (event) => {
        if (event.type === 'message_start') resolve(event.message.usage);
      }),
    );
    const usage = await started;
    expect(usage.cache_read_input_tokens).toBe(prefixTokens(2_000));
    expect((await stream.finalMessage()).usage.cache_read_input_tokens).toBe(prefixTokens(2_000));
  });

  it('charges the input limit with uncached input and writes, never with reads', async () => {
    const prefix = prefixTokens(2_500);
    // Room for one write of the prefix and a few questions, not for a second full prompt.
    const mock = await start({ limits: { inputTokens: prefix + 200 }, windowMs: 60_000 });
    const client = sdk(mock);
    await client.messages.create(cachedAsk(2_500));
    for (const question of ['One?', 'Two?', 'Three?']) {
      const answer = await client.messages.create(cachedAsk(2_500, question));
      expect(answer.usage.cache_read_input_tokens).toBe(prefix);
    }
    const spent = mock.stats().spent.input_tokens;
    expect(spent).toBeLessThanOrEqual(prefix + 200);
    // Uncached, the same prompt is refused: it would be charged in full.
    const other = await client.messages
      .create(cachedAsk(2_500, 'x', 'claude-opus-4-1'))
      .catch((e: unknown) => e);
    expect(other).toBeInstanceOf(RateLimitError);
  });

  it('writes nothing for a request the limits refuse', async () => {
    const mock = await start({ limits: { requests: 1 }, windowMs: 500 });
    const client = sdk(mock);
    await client.messages.create({ ...cachedAsk(10), system: 'Short.' });
    const refused = await client.messages.create(cachedAsk(2_000)).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(RateLimitError);
    const at = Date.now();
    await until(() => Date.now() > at + 600, 5_000);
    const after = await client.messages.create(cachedAsk(2_000));
    expect(after.usage.cache_creation_input_tokens).toBe(prefixTokens(2_000));
    expect(after.usage.cache_read_input_tokens).toBe(0);
  });

  it('does not cache a prefix below the model minimum (1,024; 2,048 for Haiku), silently', async () => {
    const mock = await start();
    const client = sdk(mock);
    const short = cachedAsk(600);
    for (let i = 0; i < 2; i++) {
      const { usage } = await client.messages.create(short);
      expect(usage.cache_creation_input_tokens).toBe(0);
      expect(usage.cache_read_input_tokens).toBe(0);
      expect(usage.input_tokens).toBe(countMockTokens(short));
    }
    const between = prefixTokens(1_500);
    expect(between).toBeGreaterThan(1_024);
    expect(between).toBeLessThan(2_048);
    const haiku = await client.messages.create(cachedAsk(1_500, 'q', 'claude-haiku-4-5'));
    expect(haiku.usage.cache_creation_input_tokens).toBe(0);
    const sonnet = await client.messages.create(cachedAsk(1_500, 'q', 'claude-sonnet-4-5'));
    expect(sonnet.usage.cache_creation_input_tokens).toBe(between);
  });

  it('lets parallel requests sent before the first response begins all pay the write', async () => {
    const mock = await start({ latencyMs: 300 });
    const client = sdk(mock);
    const together = await Promise.all(
      ['a?', 'b?', 'c?'].map((q) => client.messages.create(cachedAsk(2_000, q))),
    );
    for (const answer of together) {
      expect(answer.usage.cache_creation_input_tokens).toBe(prefixTokens(2_000));
    }
    const after = await client.messages.create(cachedAsk(2_000, 'd?'));
    expect(after.usage.cache_read_input_tokens).toBe(prefixTokens(2_000));
    expect(mock.stats().cache).toMatchObject({ writes: 3, reads: 1 });

    // Streamed the same: the prefix is readable from the first token, not from the headers.
    const streams = await Promise.all(
      ['e?', 'f?'].map((q) =>
        client.messages.stream(cachedAsk(2_000, q, 'claude-opus-4-1')).finalMessage(),
      ),
    );
    for (const answer of streams) {
      expect(answer.usage.cache_creation_input_tokens).toBe(prefixTokens(2_000));
    }
  });

  it('keeps an entry per API key and per model', async () => {
    const mock = await start();
    await sdk(mock, 'key-a').messages.create(cachedAsk(2_000));
    const otherKey = await sdk(mock, 'key-b').messages.create(cachedAsk(2_000));
    expect(otherKey.usage.cache_read_input_tokens).toBe(0);
    const otherModel = await sdk(mock, 'key-a').messages.create(
      cachedAsk(2_000, 'q', 'claude-opus-4-1'),
    );
    expect(otherModel.usage.cache_read_input_tokens).toBe(0);
  });

  it('forgets an entry its lifetime after its last use; "1h" lives twelve times as long', async () => {
    const mock = await start({ cacheTtlMs: 300 });
    const client = sdk(mock);
    const hour = {
      ...cachedAsk(2_000),
      system: [
        {
          type: 'text' as const,
          text: longPrompt(2_000, 9),
          cache_control: { type: 'ephemeral' as const, ttl: '1h' as const },
        },
      ],
    };
    await client.messages.create(cachedAsk(2_000));
    const written = await client.messages.create(hour);
    expect(written.usage.cache_creation).toMatchObject({
      ephemeral_1h_input_tokens: written.usage.cache_creation_input_tokens,
    });
    const at = Date.now();
    await until(() => Date.now() > at + 400, 5_000);
    expect((await client.messages.create(cachedAsk(2_000))).usage.cache_read_input_tokens).toBe(0);
    expect((await client.messages.create(hour)).usage.cache_read_input_tokens).toBeGreaterThan(0);
  });

  it('reads the longest cached breakpoint and writes the ones after it, tools first', async () => {
    const mock = await start();
    const client = sdk(mock);
    const tools = [
      {
        name: 'lookup',
        description: longPrompt(1_500, 3),
        input_schema: { type: 'object' as const },
        cache_control: ephemeral,
      },
    ];
    const base = { model: 'claude-sonnet-4-5', max_tokens: 20, tools };
    const first = await client.messages.create({
      ...base,
      messages: [{ role: 'user', content: 'hi' }],
    });
    const toolsTokens = first.usage.cache_creation_input_tokens!;
    expect(toolsTokens).toBeGreaterThan(1_024);
    const longer = await client.messages.create({
      ...base,
      system: [{ type: 'text', text: longPrompt(800, 5), cache_control: ephemeral }],
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(longer.usage.cache_read_input_tokens).toBe(toolsTokens);
    expect(longer.usage.cache_creation_input_tokens).toBeGreaterThan(700);
  });

  it('refuses more than four breakpoints with the API 400', async () => {
    const mock = await start();
    const blocks = Array.from({ length: 5 }, (_, i) => ({
      type: 'text' as const,
      text: `part ${i}`,
      cache_control: ephemeral,
    }));
    const error = await sdk(mock)
      .messages.create({
        model: 'claude-sonnet-4-5',
        max_tokens: 5,
        messages: [{ role: 'user', content: blocks }],
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BadRequestError);
    expect((error as BadRequestError).message).toContain(
      'A maximum of 4 blocks with cache_control may be provided. Found 5.',
    );
  });
});
