import {
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { hashApiKey } from '../producer/http/api-keys.ts';
import { type HttpApi, startHttpApi } from '../producer/http/server.ts';
import { resolveConfig } from '../shared/config.ts';
import { enableBullmqTelemetry } from '../shared/telemetry/tracing.ts';
import { API_KEY, allCompleted, openPool, type Pool, request } from './fixtures/worker-harness.ts';
import { REDIS_URL, until } from './helpers.ts';

const TENANT_KEY = 'sk-tenant-trace-0123456789';
const exporter = new InMemorySpanExporter();
const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });

let pool: Pool | undefined;
let api: HttpApi | undefined;
beforeAll(() => {
  provider.register();
  enableBullmqTelemetry();
});
afterAll(async () => {
  enableBullmqTelemetry(false);
  await provider.shutdown();
});
afterEach(async () => {
  await api?.close();
  await pool?.cleanup();
  api = undefined;
  pool = undefined;
  exporter.reset();
});

/** A traceparent the caller's own tracing would send. */
const CALLER_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CALLER_SPAN = '00f067aa0ba902b7';

async function openApi(p: Pool): Promise<HttpApi> {
  const config = resolveConfig({
    flags: { queue: p.names.queue, prefix: p.names.prefix, redisUrl: REDIS_URL },
    env: {},
  });
  return startHttpApi({ config, apiKeys: `acme:${hashApiKey(TENANT_KEY)}`, port: 0 });
}

async function postJob(url: string, maxTokens: number, traceparent?: string): Promise<string> {
  const res = await fetch(`${url}/v1/jobs`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${TENANT_KEY}`,
      'content-type': 'application/json',
      ...(traceparent ? { traceparent } : {}),
    },
    body: JSON.stringify({
      request: request('Trace me, please.', maxTokens),
      priority: 'interactive',
    }),
  });
  expect(res.status).toBe(202);
  return ((await res.json()) as { id: string }).id;
}

const ms = (t: [number, number]) => t[0] * 1_000 + t[1] / 1e6;
const llmqSpans = (jobId: string) =>
  exporter.getFinishedSpans().filter((s) => s.attributes['llmq.job.id'] === jobId);

describe('traces', () => {
  it('one job: enqueue, wait for output budget, call, settle, in order, in the caller’s trace', async () => {
    // Every call spends its whole max_tokens: the second job must wait for the window.
    pool = await openPool('trace', { latencyMs: 30, outputShare: 1 });
    api = await openApi(pool);
    await pool.worker({ limiter: { limits: { outputTokens: 100 }, windowMs: 1_500, headroom: 0 } });
    const first = await postJob(api.url, 80);
    const second = await postJob(api.url, 80, `00-${CALLER_TRACE}-${CALLER_SPAN}-01`);
    await allCompleted(pool, [first, second], 20_000);
    await until(() => llmqSpans(second).some((s) => s.name === 'llmq.settle'), 5_000);

    const spans = llmqSpans(second);
    const byName = (n: string) => spans.filter((s) => s.name === n);
    const [enqueue] = byName('llmq.enqueue');
    const [call] = byName('chat claude-test-1');
    const [settle] = byName('llmq.settle');
    const waits = byName('llmq.wait');
    expect(enqueue && call && settle && waits.length > 0).toBe(true);

    // Linked to the HTTP request's trace: the enqueue span is the caller's span's child, and
    // every span of the job is in that trace under it.
    expect(enqueue!.spanContext().traceId).toBe(CALLER_TRACE);
    expect(enqueue!.parentSpanContext?.spanId).toBe(CALLER_SPAN);
    expect(enqueue!.attributes).toMatchObject({
      'llmq.tenant': 'acme',
      'llmq.priority': 10,
      'llmq.cost.output_tokens': 80,
    });
    for (const s of [call!, settle!, ...waits]) {
      expect(s.spanContext().traceId).toBe(CALLER_TRACE);
      expect(s.parentSpanContext?.spanId).toBe(enqueue!.spanContext().spanId);
    }

    // It waited for the global output-token budget, then called, then settled.
    const budget = waits.find((w) => w.attributes['llmq.wait.reason'] === 'budget');
    expect(budget?.attributes).toMatchObject({
      'llmq.wait.scope': 'global',
      'llmq.wait.dimension': 'outputTokens',
    });
    expect(ms(enqueue!.startTime)).toBeLessThanOrEqual(ms(budget!.startTime));
    expect(ms(budget!.endTime)).toBeLessThanOrEqual(ms(call!.startTime) + 1);
    expect(ms(call!.startTime)).toBeLessThanOrEqual(ms(settle!.startTime));

    // The provider call, after the GenAI conventions, with the provider's request id.
    const result = (await pool.job(second))!.returnvalue;
    expect(call!.attributes).toMatchObject({
      'gen_ai.system': 'anthropic',
      'gen_ai.operation.name': 'chat',
      'gen_ai.request.model': 'claude-test-1',
      'gen_ai.usage.input_tokens': result.message.usage.input_tokens,
      'gen_ai.usage.output_tokens': 80,
      'llmq.provider.request_id': result.requestId,
      'http.response.status_code': 200,
    });
    expect(call!.status.code).toBe(1); // OK

    // The SDK's own span of the request nests inside llmq's call span.
    const sdk = exporter
      .getFinishedSpans()
      .filter((s: ReadableSpan) => s.parentSpanContext?.spanId === call!.spanContext().spanId);
    expect(sdk.length).toBeGreaterThan(0);

    // A job enqueued without a traceparent starts a trace of its own.
    const [firstEnqueue] = llmqSpans(first).filter((s) => s.name === 'llmq.enqueue');
    expect(firstEnqueue!.spanContext().traceId).not.toBe(CALLER_TRACE);
  });

  it('no span attribute holds a key, and a dead letter ends the job’s trace', async () => {
    pool = await openPool('tracedl', { latencyMs: 10 });
    api = await openApi(pool);
    await pool.worker({ limiter: { limits: { tokens: 100_000 } } });
    // The mock answers 400 for a model it does not know: dead-lettered at once.
    const res = await fetch(`${api.url}/v1/jobs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TENANT_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ request: { ...request('x', 10), model: 'no-such-model' } }),
    });
    const { id } = (await res.json()) as { id: string };
    await until(() => llmqSpans(id).some((s) => s.name === 'llmq.dead_letter'), 15_000);
    const dead = llmqSpans(id).find((s) => s.name === 'llmq.dead_letter')!;
    expect(dead.status.code).toBe(2); // ERROR
    const call = llmqSpans(id).find((s) => s.name.startsWith('chat '))!;
    expect(call.attributes['http.response.status_code']).toBe(404);

    const all = JSON.stringify(
      exporter.getFinishedSpans().map((s) => [s.name, s.attributes, s.events]),
    );
    expect(all).not.toContain(API_KEY);
    expect(all).not.toContain(TENANT_KEY);
  });
});
