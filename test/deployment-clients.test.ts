/**
 * A pool's callers: each kind of deployment called over HTTP through its real SDK against the
 * mock (fake credentials read from the variables the config names), plain and streamed, with the
 * platform's model id; a credential variable that is not set refused at start, by its name only.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { DeploymentConfig } from '../shared/deployments.ts';
import { ConfigError, ModelNotServedError } from '../shared/errors.ts';
import { type HeaderSource, header } from '../shared/provider-headers.ts';
import type { MessagesRequest } from '../shared/request.ts';
import { countMockTokens } from '../testing/mock-anthropic/index.ts';
import { classifyProviderError, PLATFORM_THROTTLE_MS } from '../worker/classify.ts';
import { createDeploymentCallers } from '../worker/deployment-clients.ts';
import type { ProviderCallOptions } from '../worker/provider.ts';
import { eachTestMocks } from './fixtures/mock-servers.ts';

const start = eachTestMocks();
const MODEL = 'claude-sonnet-4-6';
const BEDROCK_MODEL = 'anthropic.claude-sonnet-4-6-v1:0';
const VERTEX_MODEL = 'claude-sonnet-4-6@default';
const ENV = {
  KEY_EU: 'sk-ant-test-eu-0000',
  AWS_KEY_ID: 'AKIDMOCKTEST',
  AWS_SECRET: 'mock-secret-do-not-show',
  VERTEX_TOKEN: 'ya29.mock-token-do-not-show',
};

const ask = (maxTokens = 40): MessagesRequest =>
  ({
    model: MODEL,
    max_tokens: maxTokens,
    messages: [{ role: 'user', content: 'Name three rivers of Europe.' }],
  }) as MessagesRequest;

const anthropic = (url: string): DeploymentConfig => ({
  name: 'eu',
  kind: 'anthropic',
  credentials: { apiKeyEnv: 'KEY_EU' },
  baseUrl: url,
});
const bedrock = (url: string): DeploymentConfig => ({
  name: 'aws',
  kind: 'bedrock',
  region: 'us-east-1',
  baseUrl: url,
  credentials: { awsAccessKeyEnv: 'AWS_KEY_ID', awsSecretKeyEnv: 'AWS_SECRET' },
  models: { 'claude-sonnet-*': BEDROCK_MODEL },
});
const vertex = (url: string): DeploymentConfig => ({
  name: 'gcp',
  kind: 'vertex',
  region: 'us-east5',
  projectId: 'mock-project',
  baseUrl: `${url}/v1`,
  credentials: { accessTokenEnv: 'VERTEX_TOKEN' },
  models: { [MODEL]: VERTEX_MODEL },
});

/** A call's options, recording the headers `onStart` saw and the relayed stream's events. */
function recorded(stream: boolean, relay = false) {
  const seen: { started: HeaderSource[]; events: string[] } = { started: [], events: [] };
  const options: ProviderCallOptions = {
    stream,
    timeoutMs: 10_000,
    onStart: async (h) => {
      seen.started.push(h);
    },
    ...(relay ? { onEvent: (name: string) => seen.events.push(name) } : {}),
  };
  return { options, seen };
}

const refusal = async (deployments: DeploymentConfig[], env: Record<string, string>) => {
  const error = await createDeploymentCallers(deployments, env).then(
    () => undefined,
    (e: unknown) => e as Error,
  );
  expect(error).toBeInstanceOf(ConfigError);
  return error!.message;
};

describe('createDeploymentCallers', () => {
  it('calls the Claude API with the key the config names, plain and streamed', async () => {
    const mock = await start({ outputShare: 1, limits: { requests: 50, tokens: 100_000 } });
    const eu = (await createDeploymentCallers([anthropic(mock.url)], ENV)).get('eu')!;
    expect(eu.batches).toBe(true);
    const plain = recorded(false);
    const result = await eu.caller(ask(), plain.options);
    expect(result.message.model).toBe(MODEL);
    expect(result.message.usage.input_tokens).toBe(countMockTokens(ask()));
    expect(header(result.headers, 'anthropic-ratelimit-requests-limit')).toBe('50');
    expect(plain.seen.started).toHaveLength(1);
    const streamed = recorded(true, true);
    const s = await eu.caller(ask(90), streamed.options);
    expect(s.message.usage.output_tokens).toBe(90);
    expect(streamed.seen.events[0]).toBe('message_start');
    expect(mock.stats().responses).toEqual({ '200': 2 });
  });

  it('calls Bedrock by its model id, signed with the named AWS keys, plain and streamed', async () => {
    const mock = await start({ outputShare: 1 });
    const aws = (await createDeploymentCallers([bedrock(mock.url)], ENV)).get('aws')!;
    expect(aws.batches).toBe(false);
    expect(aws.platformModel(MODEL)).toBe(BEDROCK_MODEL);
    const plain = recorded(false);
    const result = await aws.caller(ask(), plain.options);
    expect(result.message.model).toBe(BEDROCK_MODEL);
    expect(result.message.usage).toMatchObject({
      input_tokens: countMockTokens(ask()),
      output_tokens: 40,
    });
    expect(header(result.headers, 'x-amzn-bedrock-output-token-count')).toBe('40');
    expect(header(plain.seen.started[0], 'x-amzn-bedrock-output-token-count')).toBe('40');
    // Streamed: the SDK's own reading, and the relay of every event (the event stream as SSE).
    const s = await aws.caller(ask(120), recorded(true).options);
    expect(s.message).toMatchObject({ model: BEDROCK_MODEL, stop_reason: 'max_tokens' });
    // Given by its platform id already (as the pool's worker does), the model goes as it is.
    const again = await aws.caller({ ...ask(), model: BEDROCK_MODEL }, recorded(false).options);
    expect(again.message.model).toBe(BEDROCK_MODEL);
    expect(s.message.usage.output_tokens).toBe(120);
    const relayed = recorded(true, true);
    await aws.caller(ask(30), relayed.options);
    expect(relayed.seen.events[0]).toBe('message_start');
    expect(relayed.seen.events.at(-1)).toBe('message_stop');
    expect(relayed.seen.started).toHaveLength(1);
    expect(mock.stats()).toMatchObject({ admitted: 4, responses: { '200': 4 } });
  });

  it('calls Vertex AI by its model id with the named token, plain and streamed', async () => {
    const mock = await start({ outputShare: 1 });
    const gcp = (await createDeploymentCallers([vertex(mock.url)], ENV)).get('gcp')!;
    const result = await gcp.caller(ask(), recorded(false).options);
    expect(result.message.model).toBe(VERTEX_MODEL);
    expect(result.message.usage.output_tokens).toBe(40);
    expect(header(result.headers, 'anthropic-ratelimit-requests-limit')).toBeUndefined();
    const relayed = recorded(true, true);
    const s = await gcp.caller(ask(70), relayed.options);
    expect(s.message.usage.output_tokens).toBe(70);
    expect(relayed.seen.events).toContain('content_block_delta');
    expect(mock.stats().responses).toEqual({ '200': 2 });
  });

  it("waits out Bedrock's and Vertex AI's throttling (a 429 without retry-after), not a spent key", async () => {
    const mocks = [
      await start({ limits: { requests: 1 } }),
      await start({ limits: { requests: 1 } }),
    ];
    const [aws, gcp] = [bedrock(mocks[0]!.url), vertex(mocks[1]!.url)];
    const callers = await createDeploymentCallers([aws, gcp], ENV);
    for (const name of ['aws', 'gcp']) {
      const d = callers.get(name)!;
      await d.caller(ask(), recorded(false).options);
      const throttled = await d.caller(ask(), recorded(false).options).catch((e: unknown) => e);
      expect(classifyProviderError(throttled)).toMatchObject({
        kind: 'rate_limited',
        status: 429,
        retryAfterMs: PLATFORM_THROTTLE_MS,
      });
    }
    expect(mocks.map((m) => m.stats().responses['429'])).toEqual([1, 1]);
  });

  it('refuses a model a deployment does not serve, without calling it', async () => {
    const mock = await start();
    const callers = await createDeploymentCallers([bedrock(mock.url), vertex(mock.url)], ENV);
    expect(callers.get('aws')!.platformModel('claude-haiku-4-5')).toBeUndefined();
    expect(callers.get('gcp')!.platformModel('claude-sonnet-4-6-20260101')).toBeUndefined();
    const refused = await callers
      .get('gcp')!
      .caller({ ...ask(), model: 'claude-haiku-4-5' }, recorded(false).options)
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ModelNotServedError);
    expect((refused as Error).message).toContain('deployment gcp serves only claude-sonnet-4-6');
    expect(mock.stats().attempts).toBe(0);
  });

  it('refuses at start a credential variable that is not set, naming it and never a secret', async () => {
    const url = 'http://127.0.0.1:9';
    const { KEY_EU: _, ...noEu } = ENV;
    expect(await refusal([anthropic(url)], noEu)).toBe(
      'deployment eu (anthropic): the environment variable KEY_EU (credentials.apiKeyEnv) is not ' +
        'set: set it to the API key, or name another variable in the config',
    );
    const { AWS_SECRET: __, ...noSecret } = ENV;
    const aws = await refusal([bedrock(url)], { ...noSecret, AWS_SECRET: '' });
    expect(aws).toMatch(
      /^deployment aws \(bedrock\): the environment variable AWS_SECRET \(credentials.awsSecretKeyEnv\) is not set/,
    );
    const { VERTEX_TOKEN: ___, ...noToken } = ENV;
    expect(await refusal([vertex(url)], noToken)).toMatch(/the environment variable VERTEX_TOKEN/);
    const plain: DeploymentConfig = { name: 'default', kind: 'anthropic', baseUrl: url };
    expect(await refusal([plain], {})).toMatch(
      /the environment variable ANTHROPIC_API_KEY \(credentials.apiKeyEnv\)/,
    );
    for (const message of [aws, await refusal([anthropic(url), bedrock(url)], noSecret)]) {
      for (const secret of Object.values(ENV)) expect(message).not.toContain(secret);
    }
  });
});

describe('Vertex AI without a token variable', () => {
  const saved = process.env['GOOGLE_APPLICATION_CREDENTIALS'];
  afterEach(() => {
    if (saved === undefined) delete process.env['GOOGLE_APPLICATION_CREDENTIALS'];
    else process.env['GOOGLE_APPLICATION_CREDENTIALS'] = saved;
  });

  it("stops at start when Google's default credentials are missing, saying what to set", async () => {
    process.env['GOOGLE_APPLICATION_CREDENTIALS'] = '/nonexistent/llmq-test-adc.json';
    const { credentials: _, ...adc } = vertex('http://127.0.0.1:9');
    const message = await refusal([adc], {});
    expect(message).toMatch(
      /^deployment gcp \(vertex\): Google's application default credentials were not found/,
    );
    expect(message).toContain('credentials.accessTokenEnv');
  });
});
