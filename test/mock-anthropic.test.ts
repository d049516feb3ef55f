import Anthropic, { type APIError, NotFoundError, RateLimitError } from '@anthropic-ai/sdk';
import { describe, expect, it } from 'vitest';
import {
  countMockTokens,
  countTextTokens,
  type MockAnthropicHandle,
  type MockStats,
  startMockAnthropic,
} from '../testing/mock-anthropic/index.ts';
import { eachTestMocks } from './fixtures/mock-servers.ts';

const start = eachTestMocks();

function sdk(mock: MockAnthropicHandle, apiKey = 'test-key'): Anthropic {
  return new Anthropic({ apiKey, baseURL: mock.url, maxRetries: 0 });
}

function post(
  mock: MockAnthropicHandle,
  path: string,
  body: unknown,
  headers = {},
): Promise<Response> {
  return fetch(`${mock.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

const params = {
  model: 'claude-mock-1',
  max_tokens: 40,
  system: 'You answer briefly.',
  messages: [
    { role: 'user' as const, content: 'Summarise the plot of Hamlet in two sentences, please.' },
  ],
};

interface ErrorJson {
  type: string;
  error: { type: string; message: string };
  request_id: string;
}

async function errorJson(response: Response): Promise<ErrorJson> {
  return (await response.json()) as ErrorJson;
}

function textOf(message: Anthropic.Message): string {
  return message.content.map((block) => (block.type === 'text' ? block.text : '')).join('');
}

describe('mock Anthropic server, as the SDK sees it', () => {
  it('answers messages.create with the real shape, usage from its tokenizer and a stop reason', async () => {
    const mock = await start({ outputShare: 0.5 });
    const { data, response } = await sdk(mock).messages.create(params).withResponse();

    expect(data).toMatchObject({
      type: 'message',
      role: 'assistant',
      model: params.model,
      stop_reason: 'end_turn',
      stop_sequence: null,
      usage: {
        input_tokens: countMockTokens(params),
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
        output_tokens: 20,
      },
    });
    expect(data.id).toMatch(/^msg_/);
    expect(data.content).toHaveLength(1);
    expect(countTextTokens(textOf(data))).toBe(20);
    expect(response.headers.get('content-type')).toContain('application/json');
    expect(response.headers.get('request-id')).toMatch(/^req_/);

    const full = await start({ outputShare: 1 });
    const capped = await sdk(full).messages.create(params);
    expect(capped.stop_reason).toBe('max_tokens');
    expect(capped.usage.output_tokens).toBe(params.max_tokens);
  });

  it('gives the same body the same answer, and output within the default share range', async () => {
    const mock = await start();
    const client = sdk(mock);
    const first = await client.messages.create({ ...params, max_tokens: 1000 });
    const again = await client.messages.create({ ...params, max_tokens: 1000 });
    expect(textOf(again)).toBe(textOf(first));
    expect(first.usage.output_tokens).toBeGreaterThanOrEqual(300);
    expect(first.usage.output_tokens).toBeLessThanOrEqual(900);
  });

  it('streams events the SDK assembles into the same kind of message', async () => {
    const mock = await start({ outputShare: 1 });
    const message = await sdk(mock)
      .messages.stream({ ...params, max_tokens: 200 })
      .finalMessage();
    expect(message.usage).toMatchObject({
      input_tokens: countMockTokens(params),
      output_tokens: 200,
    });
    expect(message.stop_reason).toBe('max_tokens');
    expect(countTextTokens(textOf(message))).toBe(200);
  });

  it('sends the event-stream headers at once and spreads the latency over the events', async () => {
    const mock = await start({ latencyMs: 300, latencyPerOutputTokenMs: 2, outputShare: 1 });
    const started = Date.now();
    const response = await post(
      mock,
      '/v1/messages',
      { ...params, max_tokens: 50, stream: true },
      { 'x-api-key': 'k' },
    );
    expect(response.headers.get('content-type')).toContain('text/event-stream');
    expect(response.headers.get('anthropic-ratelimit-requests-limit')).toBeNull();
    // The headers and the first events come before the latency: the first read has the start
    // of the message and not its end.
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    const first = decoder.decode((await reader.read()).value);
    expect(first).toContain('event: message_start');
    expect(first).not.toContain('event: message_stop');
    let text = first;
    for (let r = await reader.read(); !r.done; r = await reader.read())
      text += decoder.decode(r.value);
    // Never sooner than the latency it was given (load only makes it later).
    expect(Date.now() - started).toBeGreaterThanOrEqual(300 + 2 * 50 - 20);

    const events = [...text.matchAll(/^event: (\w+)$/gm)].map((match) => match[1]);
    const deltas = events.filter((event) => event === 'content_block_delta').length;
    expect(deltas).toBeGreaterThan(1);
    expect(events).toEqual([
      'message_start',
      'content_block_start',
      'ping',
      ...Array(deltas).fill('content_block_delta'),
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    const messageDelta = /event: message_delta\ndata: (.*)\n/.exec(text)?.[1];
    expect(JSON.parse(messageDelta ?? '{}')).toMatchObject({
      delta: { stop_reason: 'max_tokens' },
      usage: { output_tokens: 50 },
    });
  });

  it('waits base latency plus per-token latency before a plain answer', async () => {
    const mock = await start({ latencyMs: 100, latencyPerOutputTokenMs: 4, outputShare: 1 });
    const started = Date.now();
    await sdk(mock).messages.create({ ...params, max_tokens: 25 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(100 + 4 * 25 - 5);
  });

  it('changes latency and output share at runtime, and refuses to change anything else', async () => {
    const mock = await start({ outputShare: 0.5 });
    const client = sdk(mock);
    expect((await client.messages.create(params)).usage.output_tokens).toBe(20);

    mock.setOptions({ latencyMs: 150, outputShare: 1 });
    const started = Date.now();
    expect((await client.messages.create(params)).usage.output_tokens).toBe(40);
    expect(Date.now() - started).toBeGreaterThanOrEqual(145);

    expect(() => mock.setOptions({ latencyMs: -5 })).toThrow(
      'latencyMs must be a number >= 0, got -5',
    );
    expect(() => mock.setOptions({ windowMs: 5 } as never)).toThrow(
      'setOptions cannot change "windowMs"',
    );
  });

  it('counts tokens with the same tokenizer, free of the message limits', async () => {
    const mock = await start({ limits: { requests: 1 } });
    const client = sdk(mock);
    const { max_tokens: _unused, ...countParams } = params;
    for (let i = 0; i < 3; i++) {
      const counted = await client.messages.countTokens(countParams);
      expect(counted.input_tokens).toBe(countMockTokens(countParams));
    }
    const created = await client.messages.create(params);
    expect(created.usage.input_tokens).toBe(countMockTokens(params));
    expect(mock.stats()).toMatchObject({ countTokensCalls: 3, attempts: 1, admitted: 1 });
  });

  it('counts input as characters / charsPerToken + perMessageTokens a message when asked, in usage, count_tokens and limits alike', async () => {
    // 'You answer briefly.' (19) + the question (54): 73 characters, one message.
    const counting = { charsPerToken: 3.6, perMessageTokens: 7 };
    const expected = Math.ceil(73 / 3.6) + 7;
    const mock = await start({ ...counting, limits: { inputTokens: 2 * expected } });
    const client = sdk(mock);
    const { max_tokens: _unused, ...countParams } = params;
    expect((await client.messages.countTokens(countParams)).input_tokens).toBe(expected);
    const created = await client.messages.create(params);
    expect(created.usage.input_tokens).toBe(expected);
    expect(expected).not.toBe(countMockTokens(params));
    expect(countMockTokens(params, counting)).toBe(expected);
    // The limit counts the same way: two fit in the window, the third is refused.
    await client.messages.create(params);
    await expect(client.messages.create(params)).rejects.toBeInstanceOf(RateLimitError);
    expect(mock.stats()).toMatchObject({ admitted: 2 });
  });

  it('answers 401 authentication_error without an API key, with the request id in body and header', async () => {
    const mock = await start();
    for (const headers of [{}, { 'x-api-key': '' }]) {
      const response = await post(mock, '/v1/messages', params, headers);
      expect(response.status).toBe(401);
      const body = await errorJson(response);
      expect(body).toEqual({
        type: 'error',
        error: { type: 'authentication_error', message: expect.stringContaining('x-api-key') },
        request_id: response.headers.get('request-id'),
      });
      expect(body.request_id).toMatch(/^req_/);
    }
    expect((await post(mock, '/v1/messages', params, { 'x-api-key': 'k' })).status).toBe(200);
  });

  it.each([
    [{ ...params, max_tokens: undefined }, 'max_tokens: Field required'],
    [{ ...params, max_tokens: 0 }, 'max_tokens: Input should be greater than or equal to 1'],
    [{ ...params, max_tokens: 1.5 }, 'max_tokens: Input should be a valid integer'],
    [{ ...params, model: 7 }, 'model: Input should be a valid string'],
    [{ ...params, messages: [] }, 'messages: at least one message is required'],
    [
      { ...params, messages: [{ role: 'system', content: 'hi' }] },
      "messages.0.role: Input should be 'user' or 'assistant'",
    ],
    [{ ...params, messages: [{ role: 'user' }] }, 'messages.0.content: Field required'],
    [
      { ...params, messages: [{ role: 'user', content: [{ type: 'text', text: 5 }] }] },
      'messages.0.content.0.text: Input should be a valid string',
    ],
    [
      { ...params, messages: [{ role: 'user', content: [{ type: 'video' }] }] },
      "messages.0.content.0.type: Input tag 'video' found",
    ],
    [
      { ...params, messages: [{ role: 'user', content: [{ type: 'image' }] }] },
      'messages.0.content.0.source: Field required',
    ],
    [
      {
        ...params,
        messages: [
          {
            role: 'user',
            content: [{ type: 'text', text: 'x', cache_control: { type: 'eternal' } }],
          },
        ],
      },
      "messages.0.content.0.cache_control.type: Input should be 'ephemeral'",
    ],
    [{ ...params, stream: 'yes' }, 'stream: Input should be a valid boolean'],
    [{ ...params, temperature: 2 }, 'temperature: Input should be less than or equal to 1'],
    [{ ...params, stop_sequences: 'END' }, 'stop_sequences: Input should be a valid list'],
    [{ ...params, system: 3 }, 'system: Input should be a valid string or a list of text blocks'],
  ])('answers 400 invalid_request_error naming the field (%#)', async (body, message) => {
    const mock = await start();
    const response = await post(mock, '/v1/messages', body, { 'x-api-key': 'k' });
    expect(response.status).toBe(400);
    const json = await errorJson(response);
    expect(json.type).toBe('error');
    expect(json.error.type).toBe('invalid_request_error');
    expect(json.error.message.startsWith(message)).toBe(true);
    expect(mock.stats()).toMatchObject({ attempts: 1, admitted: 0, responses: { '400': 1 } });
  });

  it('accepts unknown extra fields and text blocks, and refuses malformed JSON', async () => {
    const mock = await start();
    const extra = {
      ...params,
      system: [{ type: 'text', text: 'Be brief.' }],
      messages: [
        {
          role: 'user',
          content: [{ type: 'text', text: 'Hi', cache_control: { type: 'ephemeral' } }],
        },
      ],
      metadata: { user_id: 'u1' },
      service_tier: 'auto',
    };
    expect((await post(mock, '/v1/messages', extra, { 'x-api-key': 'k' })).status).toBe(200);
    const broken = await post(mock, '/v1/messages', '{"model":', { 'x-api-key': 'k' });
    expect(broken.status).toBe(400);
    expect((await errorJson(broken)).error.type).toBe('invalid_request_error');
  });

  it('answers 404 not_found_error for a model that is not claude-…', async () => {
    const mock = await start();
    const error = await sdk(mock)
      .messages.create({ ...params, model: 'gpt-4o' })
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(NotFoundError);
    expect((error as APIError).type).toBe('not_found_error');
    expect((error as APIError).message).toContain('model: gpt-4o');
  });

  it('gives a spend-capped key a 429 with error_code and no retry-after, at start or at runtime', async () => {
    const mock = await start({ spendCappedKeys: ['capped'] });
    const capped = await sdk(mock, 'capped')
      .messages.create(params)
      .catch((caught: unknown) => caught);
    expect(capped).toBeInstanceOf(RateLimitError);
    const error = capped as RateLimitError;
    expect(error.headers.get('retry-after')).toBeNull();
    expect(error.errorCode).toBe('enforced_spend_limit_reached');
    expect(error.apiMessage).toMatch(
      /^You have reached your API usage limits: .* You will regain access on \d{4}-\d{2}-01 at 00:00 UTC\.$/,
    );
    expect(await sdk(mock, 'other').messages.create(params)).toMatchObject({ type: 'message' });

    mock.setOptions({ spendCappedKeys: ['other'] });
    await expect(sdk(mock, 'other').messages.create(params)).rejects.toBeInstanceOf(RateLimitError);
    expect(await sdk(mock, 'capped').messages.create(params)).toMatchObject({ type: 'message' });
    expect(mock.stats()).toMatchObject({
      rateLimited: { spend_cap: 2 },
      responses: { '200': 2, '429': 2 },
      admitted: 2,
    });
  });

  it('serves its stats over HTTP and clears them with /__reset', async () => {
    const mock = await start({ limits: { requests: 2 } });
    const client = sdk(mock);
    await client.messages.create(params);
    await client.messages.create(params);
    await expect(client.messages.create(params)).rejects.toBeInstanceOf(RateLimitError);

    const stats = (await (await fetch(`${mock.url}/__stats`)).json()) as MockStats;
    expect(stats).toEqual(mock.stats());
    expect(stats).toMatchObject({
      attempts: 3,
      admitted: 2,
      responses: { '200': 2, '429': 1 },
      rateLimited: { requests: 1 },
      limits: { requests: 2 },
      spent: { requests: 2 },
    });
    expect(stats.firstAdmissionAt).toBeTypeOf('number');

    const reset = await post(mock, '/__reset', '');
    expect(reset.status).toBe(204);
    expect(mock.stats()).toMatchObject({
      attempts: 0,
      admitted: 0,
      responses: {},
      spent: { requests: 0 },
      firstAdmissionAt: null,
    });
    // The limit state went too: the window is empty again.
    await client.messages.create(params);
    expect(mock.stats().admitted).toBe(1);
  });

  it('changes fault rates through /__faults and refuses a bad rate', async () => {
    const mock = await start();
    expect((await post(mock, '/__faults', { overloaded: 1 })).status).toBe(204);
    await expect(sdk(mock).messages.create(params)).rejects.toMatchObject({ status: 529 });
    const bad = await post(mock, '/__faults', { overloaded: 2 });
    expect(bad.status).toBe(400);
    expect((await errorJson(bad)).error.message).toContain(
      'faults.overloaded must be a rate from 0 to 1',
    );
    expect((await post(mock, '/__faults', {})).status).toBe(204);
    expect(await sdk(mock).messages.create(params)).toMatchObject({ type: 'message' });
  });

  it('closes promptly with a stream still open', async () => {
    const mock = await startMockAnthropic({ latencyPerOutputTokenMs: 1000, outputShare: 1 });
    const stream = sdk(mock).messages.stream({ ...params, max_tokens: 100 });
    const failed = stream.finalMessage().catch((caught: unknown) => caught);
    await new Promise<void>((resolve) => stream.once('streamEvent', () => resolve()));
    // The stream would take 100 s: close ends it instead of waiting for it.
    await mock.close();
    expect(await failed).toBeInstanceOf(Error);
  });
});
