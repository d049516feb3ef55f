/**
 * Claude on Bedrock and on Vertex AI, served by the mock and called with the official platform
 * SDKs (fake credentials: SigV4 signed with a made-up key, a made-up OAuth token), plain and
 * streaming, with each platform's errors as the SDKs turn them into errors.
 */
import { AnthropicBedrock } from '@anthropic-ai/bedrock-sdk';
import Anthropic, {
  type APIError,
  BadRequestError,
  InternalServerError,
  NotFoundError,
  RateLimitError,
} from '@anthropic-ai/sdk';
import { AnthropicVertex } from '@anthropic-ai/vertex-sdk';
import { EventStreamCodec } from '@smithy/core/event-streams';
import { describe, expect, it } from 'vitest';
import { countMockTokens, type MockAnthropicHandle } from '../testing/mock-anthropic/index.ts';
import { eachTestMocks } from './fixtures/mock-servers.ts';

const start = eachTestMocks();
const BEDROCK_MODEL = 'anthropic.claude-sonnet-4-5-20250929-v1:0';
const VERTEX_MODEL = 'claude-sonnet-4-5@20250929';
const limits = { requests: 50, tokens: 100_000 };
const SIGNED =
  'AWS4-HMAC-SHA256 Credential=AKIDRAW/20260101/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=00';

const ask = (model: string, maxTokens = 40) => ({
  model,
  max_tokens: maxTokens,
  messages: [{ role: 'user' as const, content: 'Name three rivers of Europe.' }],
});

function bedrock(mock: MockAnthropicHandle, maxRetries = 0): AnthropicBedrock {
  return new AnthropicBedrock({
    baseURL: mock.url,
    awsRegion: 'us-east-1',
    awsAccessKey: 'AKIDMOCKTEST',
    awsSecretKey: 'not-a-secret',
    maxRetries,
  });
}

type VertexOptions = NonNullable<ConstructorParameters<typeof AnthropicVertex>[0]>;
/** Stands for google-auth-library's client: a token, no network. */
const fakeGoogleAuth = {
  projectId: 'mock-project',
  getRequestHeaders: async () => new Headers({ authorization: 'Bearer ya29.mock-token' }),
} as unknown as VertexOptions['authClient'];

function vertex(mock: MockAnthropicHandle, maxRetries = 0): AnthropicVertex {
  return new AnthropicVertex({
    baseURL: `${mock.url}/v1`,
    region: 'us-east5',
    projectId: 'mock-project',
    authClient: fakeGoogleAuth,
    maxRetries,
  });
}

const rateLimitHeaders = (headers: Headers) =>
  [...headers.keys()].filter((name) => name.startsWith('anthropic-ratelimit-'));

const failure = (promise: Promise<unknown>) =>
  promise.then(
    () => undefined,
    (e: unknown) => e,
  );

describe('Bedrock: /model/{id}/invoke and invoke-with-response-stream', () => {
  it('answers the Bedrock SDK plain and streamed, with no anthropic-ratelimit headers', async () => {
    const mock = await start({ limits, outputShare: 1 });
    const client = bedrock(mock);
    const { data, response } = await client.messages.create(ask(BEDROCK_MODEL)).withResponse();
    expect(data.content[0]).toMatchObject({ type: 'text' });
    expect(data.usage).toMatchObject({
      input_tokens: countMockTokens(ask(BEDROCK_MODEL)),
      output_tokens: 40,
    });
    expect(rateLimitHeaders(response.headers)).toEqual([]);
    expect(response.headers.get('x-amzn-bedrock-output-token-count')).toBe('40');

    const streamed = await client.messages.stream(ask(BEDROCK_MODEL, 120)).finalMessage();
    expect(streamed.usage.output_tokens).toBe(120);
    expect(streamed.stop_reason).toBe('max_tokens');
    expect(mock.stats()).toMatchObject({ admitted: 2, responses: { '200': 2 } });
  });

  it('throttles with ThrottlingException 429, which the SDK raises as a RateLimitError and retries', async () => {
    const mock = await start({ limits: { requests: 1 } });
    await bedrock(mock).messages.create(ask(BEDROCK_MODEL));
    const error = (await failure(bedrock(mock, 2).messages.create(ask(BEDROCK_MODEL)))) as APIError;
    expect(error).toBeInstanceOf(RateLimitError);
    expect(error.headers?.get('x-amzn-errortype')).toMatch(/^ThrottlingException:/);
    expect(error.headers?.get('retry-after')).toBeNull();
    expect(error.error).toEqual({ message: 'Too many requests, please wait before trying again.' });
    // The first call, then the refused one and its two retries.
    expect(mock.stats().attempts).toBe(4);
  });

  it('answers overload with ServiceUnavailableException 503, and a stream failure as an exception frame', async () => {
    const overloaded = await start({ faults: { overloaded: 1 } });
    const error = (await failure(
      bedrock(overloaded).messages.create(ask(BEDROCK_MODEL)),
    )) as APIError;
    expect(error).toBeInstanceOf(InternalServerError);
    expect(error.status).toBe(503);
    expect(error.headers?.get('x-amzn-errortype')).toMatch(/^ServiceUnavailableException:/);

    const midway = await start({ faults: { midStreamError: 1 } });
    const cut = (await failure(
      bedrock(midway).messages.stream(ask(BEDROCK_MODEL, 200)).finalMessage(),
    )) as Error;
    expect(cut).toBeInstanceOf(Anthropic.APIError);
    expect(cut.message).toContain('modelStreamErrorException');
  });

  it('frames the stream as AWS event-stream chunks, each an Anthropic event in base64', async () => {
    const mock = await start({ outputShare: 1 });
    const { model: _, ...rest } = ask(BEDROCK_MODEL, 10);
    const response = await fetch(`${mock.url}/model/${BEDROCK_MODEL}/invoke-with-response-stream`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: SIGNED },
      body: JSON.stringify({ ...rest, anthropic_version: 'bedrock-2023-05-31' }),
    });
    expect(response.headers.get('content-type')).toBe('application/vnd.amazon.eventstream');
    const bytes = new Uint8Array(await response.arrayBuffer());
    const codec = new EventStreamCodec(
      (b) => new TextDecoder().decode(b),
      (t) => new TextEncoder().encode(t),
    );
    const events: string[] = [];
    for (let at = 0; at < bytes.length; ) {
      const length = new DataView(bytes.buffer, at, 4).getUint32(0);
      const message = codec.decode(bytes.subarray(at, at + length));
      expect(message.headers[':event-type']?.value).toBe('chunk');
      const { bytes: payload } = JSON.parse(new TextDecoder().decode(message.body));
      events.push((JSON.parse(Buffer.from(payload, 'base64').toString()) as { type: string }).type);
      at += length;
    }
    expect(events[0]).toBe('message_start');
    expect(events.at(-1)).toBe('message_stop');
    expect(events).toContain('content_block_delta');
  });

  it('refuses a body without anthropic_version, with a model, or without credentials', async () => {
    const mock = await start();
    const post = (body: unknown, authorization?: string) =>
      fetch(`${mock.url}/model/${encodeURIComponent(BEDROCK_MODEL)}/invoke`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          ...(authorization ? { authorization } : {}),
        },
        body: JSON.stringify(body),
      });
    const signed =
      'AWS4-HMAC-SHA256 Credential=AKIDRAW/20260101/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=00';
    const { model: _, ...rest } = ask(BEDROCK_MODEL);
    const ok = await post({ ...rest, anthropic_version: 'bedrock-2023-05-31' }, signed);
    expect(ok.status).toBe(200);
    for (const [body, message] of [
      [rest, 'required key [anthropic_version] not found'],
      [
        { ...rest, anthropic_version: 'bedrock-2023-05-31', model: 'x' },
        'extraneous key [model] is not permitted',
      ],
    ] as const) {
      const response = await post(body, signed);
      expect(response.status).toBe(400);
      expect(response.headers.get('x-amzn-errortype')).toMatch(/^ValidationException:/);
      expect(((await response.json()) as { message: string }).message).toContain(message);
    }
    const anonymous = await post({ ...rest, anthropic_version: 'bedrock-2023-05-31' });
    expect(anonymous.status).toBe(403);
  });
});

describe('Vertex AI: :rawPredict and :streamRawPredict', () => {
  it('answers the Vertex SDK plain, streamed and counted, with no anthropic-ratelimit headers', async () => {
    const mock = await start({ limits, outputShare: 1 });
    const client = vertex(mock);
    const { data, response } = await client.messages.create(ask(VERTEX_MODEL)).withResponse();
    expect(data.model).toBe(VERTEX_MODEL);
    expect(data.usage.output_tokens).toBe(40);
    expect(rateLimitHeaders(response.headers)).toEqual([]);
    const streamed = await client.messages.stream(ask(VERTEX_MODEL, 90)).finalMessage();
    expect(streamed.usage.output_tokens).toBe(90);
    const counted = await client.messages.countTokens({
      model: VERTEX_MODEL,
      messages: ask(VERTEX_MODEL).messages,
    });
    expect(counted.input_tokens).toBe(data.usage.input_tokens);
  });

  it('answers a spent quota with 429 RESOURCE_EXHAUSTED, a RateLimitError for the SDK', async () => {
    const mock = await start({ limits: { requests: 1 } });
    await vertex(mock).messages.create(ask(VERTEX_MODEL));
    const error = (await failure(vertex(mock).messages.create(ask(VERTEX_MODEL)))) as APIError;
    expect(error).toBeInstanceOf(RateLimitError);
    expect(error.error).toMatchObject({ error: { code: 429, status: 'RESOURCE_EXHAUSTED' } });
    expect(error.headers?.get('retry-after')).toBeNull();
  });

  it("passes the model's own errors in the Claude API's shape, and an unknown model as NOT_FOUND", async () => {
    const overloaded = await start({ faults: { overloaded: 1 } });
    const busy = (await failure(vertex(overloaded).messages.create(ask(VERTEX_MODEL)))) as APIError;
    expect(busy).toBeInstanceOf(InternalServerError);
    expect(busy.status).toBe(529);
    expect(busy.error).toMatchObject({ type: 'error', error: { type: 'overloaded_error' } });

    const mock = await start();
    const unknown = (await failure(vertex(mock).messages.create(ask('gemini-pro')))) as APIError;
    expect(unknown).toBeInstanceOf(NotFoundError);
    expect(unknown.error).toMatchObject({ error: { code: 404, status: 'NOT_FOUND' } });
    const bad = await failure(
      vertex(mock).messages.create({ ...ask(VERTEX_MODEL), max_tokens: 0 }),
    );
    expect(bad).toBeInstanceOf(BadRequestError);
  });

  it('refuses a request without a token with 401 UNAUTHENTICATED', async () => {
    const mock = await start();
    const path = `/v1/projects/p/locations/us-east5/publishers/anthropic/models/${VERTEX_MODEL}:rawPredict`;
    const { model: _, ...rest } = ask(VERTEX_MODEL);
    const response = await fetch(`${mock.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...rest, anthropic_version: 'vertex-2023-10-16' }),
    });
    expect(response.status).toBe(401);
    expect(await response.json()).toMatchObject({
      error: { code: 401, status: 'UNAUTHENTICATED' },
    });
  });
});
