import Anthropic from '@anthropic-ai/sdk';
import type { BaseAnthropic } from '@anthropic-ai/sdk/client';
import { Stream } from '@anthropic-ai/sdk/core/streaming';
import { MessageStream } from '@anthropic-ai/sdk/lib/MessageStream';
import type { StoredMessage } from '../shared/job.ts';
import type { HeaderSource } from '../shared/provider-headers.ts';
import type { MessagesRequest } from '../shared/request.ts';
import { type CallBounds, ResponseWatch } from './response-bounds.ts';

/**
 * Builds the SDK client a worker calls the provider with: the SDK's own retries are off (llmq
 * retries, in one layer, with the shared budget in mind). `baseURL` points it elsewhere (a
 * gateway, the mock of `llmq/testing`).
 *
 * @example
 * ```ts
 * const client = createProviderClient({ apiKey: process.env.ANTHROPIC_API_KEY ?? '' });
 * const viaMock = createProviderClient({ apiKey: 'sk-test', baseURL: mock.url });
 * ```
 */
export function createProviderClient(options: {
  apiKey: string;
  baseURL?: string | undefined;
  timeoutMs?: number;
}): Anthropic {
  return new Anthropic({
    apiKey: options.apiKey,
    ...(options.baseURL ? { baseURL: options.baseURL } : {}),
    maxRetries: 0,
    timeout: options.timeoutMs ?? 600_000,
  });
}

/**
 * What {@link callProvider} needs of a client: the Claude API's, or a platform's (Bedrock's,
 * Vertex AI's), which share `messages.create` and `messages.stream`.
 */
export type MessagesClient = BaseAnthropic & {
  readonly messages: Pick<Anthropic.Messages, 'create' | 'stream'>;
};

/**
 * What the worker passes to each call.
 * @inline
 */
export interface ProviderCallOptions {
  /** Stream the response: its headers arrive as soon as the provider admits the call. */
  readonly stream: boolean;
  readonly timeoutMs: number;
  readonly signal?: AbortSignal | undefined;
  /**
   * How long the provider may stay silent: until the first byte, then between two reads. A call
   * past a bound is aborted with a `ResponseTimeoutError`. Absent: only `timeoutMs` bounds it.
   */
  readonly bounds?: CallBounds | undefined;
  /**
   * Called once the response has begun (headers in hand), before the body is read, with how long
   * ago the request was sent (a reading counts no call begun since; absent: since the job began).
   */
  readonly onStart?: ((headers: HeaderSource, sentAgoMs?: number) => Promise<void>) | undefined;
  /** Extra request headers (the caller's `anthropic-version`, `anthropic-beta`). */
  readonly headers?: Readonly<Record<string, string>> | undefined;
  /**
   * Once a streamed answer's first token arrived, with the usage its start reported (a cached
   * prefix is readable by other calls from then on).
   */
  readonly onFirstToken?: ((usage: Anthropic.Usage) => void) | undefined;
  /** Every stream event as it arrives: its SSE name and its data (JSON text). */
  readonly onEvent?: ((name: string, data: string) => void) | undefined;
}

/**
 * What a call gives back: the stored message, the response's headers, its request id and latency.
 * @inline
 */
export interface ProviderCallResult {
  readonly message: StoredMessage;
  readonly headers: HeaderSource;
  readonly requestId: string | null;
  readonly latencyMs: number;
}

/** The Message as llmq stores it (also for a Message Batches result). */
export function store(m: Anthropic.Message): StoredMessage {
  return {
    id: m.id,
    model: m.model,
    role: 'assistant',
    content: m.content,
    stop_reason: m.stop_reason,
    stop_sequence: m.stop_sequence,
    usage: {
      input_tokens: m.usage.input_tokens,
      output_tokens: m.usage.output_tokens,
      cache_creation_input_tokens: m.usage.cache_creation_input_tokens ?? null,
      cache_read_input_tokens: m.usage.cache_read_input_tokens ?? null,
    },
  };
}

/**
 * One provider call as the worker makes it. The default is {@link callProvider} with the SDK
 * client; another (a gateway of your own, a test double, the bench's zero-latency stand-in) must
 * call `onStart` once the provider has admitted the call, and throw errors that
 * `classifyProviderError` understands (the SDK's, or any with a `status` and `headers`).
 * @inline
 */
export type ProviderCaller = (
  request: MessagesRequest,
  options: ProviderCallOptions,
) => Promise<ProviderCallResult>;

/**
 * A streamed call, its response begun. With `onEvent`, every SSE event goes to it as the
 * provider sent it, `ping` too (the SDK's parser skips those): the body is read twice, by the
 * SDK for the message and raw for the relay (`relayed` settles once the relay has read it all).
 */
async function openStream(
  client: MessagesClient,
  params: Anthropic.MessageCreateParamsNonStreaming,
  reqOptions: Record<string, unknown>,
  onEvent: ((name: string, data: string) => void) | undefined,
  onFirstToken: ((usage: Anthropic.Usage) => void) | undefined,
): Promise<{
  stream: MessageStream;
  headers: HeaderSource;
  requestId: string | null;
  relayed: Promise<void>;
}> {
  if (!onEvent) {
    const stream = client.messages.stream(
      { ...params, stream: true } as unknown as Anthropic.MessageStreamParams,
      reqOptions,
    );
    // Keep an unhandled rejection from escaping while we wait for the headers.
    stream.on('error', () => {});
    watchFirstToken(stream, onFirstToken);
    const { response, request_id } = await stream.withResponse();
    return {
      stream,
      headers: response.headers,
      requestId: request_id ?? null,
      relayed: Promise.resolve(),
    };
  }
  const response = await client.messages
    .create({ ...params, stream: true } as Anthropic.MessageCreateParamsStreaming, reqOptions)
    .asResponse();
  const [forSdk, forRelay] = response.body!.tee();
  const parsed = Stream.fromSSEResponse<Anthropic.MessageStreamEvent>(
    new Response(forSdk, { status: response.status, headers: response.headers }),
    new AbortController(),
    client,
  );
  const stream = MessageStream.fromReadableStream(parsed.toReadableStream());
  stream.on('error', () => {});
  watchFirstToken(stream, onFirstToken);
  const relayed = (async () => {
    for await (const sse of Stream.rawEvents(new Response(forRelay))) {
      // An error event is relayed by the call's end, with the error the SDK made of it.
      if (sse.event && sse.event !== 'error') onEvent(sse.event, sse.data);
    }
  })().catch(() => {});
  return {
    stream,
    headers: response.headers,
    requestId: response.headers.get('request-id'),
    relayed,
  };
}

/** Tells `first` the usage the stream's start reported, once its first token arrived. */
function watchFirstToken(
  stream: MessageStream,
  first: ((usage: Anthropic.Usage) => void) | undefined,
): void {
  if (!first) return;
  let usage: Anthropic.Usage | undefined;
  stream.on('streamEvent', (e) => {
    if (e.type === 'message_start') usage = e.message.usage;
    else if (e.type === 'content_block_delta' && usage) {
      first(usage);
      usage = undefined;
    }
  });
}

/**
 * One call of the Messages API through the SDK; errors are the SDK's, for classification, or a
 * `ResponseTimeoutError` when the provider stayed silent past a bound.
 */
export async function callProvider(
  client: MessagesClient,
  request: MessagesRequest,
  options: ProviderCallOptions,
): Promise<ProviderCallResult> {
  const watch = options.bounds && new ResponseWatch(options.bounds, options.signal);
  try {
    return await callOnce(client, request, options, watch);
  } catch (err) {
    throw watch ? watch.errorOf(err) : err;
  } finally {
    watch?.end();
  }
}

async function callOnce(
  client: MessagesClient,
  request: MessagesRequest,
  options: ProviderCallOptions,
  watch: ResponseWatch | undefined,
): Promise<ProviderCallResult> {
  const started = performance.now();
  const signal = watch?.signal ?? options.signal;
  const reqOptions = {
    timeout: options.timeoutMs,
    ...(signal ? { signal } : {}),
    ...(watch ? { middleware: [watch.middleware] } : {}),
    ...(options.headers ? { headers: { ...options.headers } } : {}),
  };
  const params = request as unknown as Anthropic.MessageCreateParamsNonStreaming;
  if (options.stream) {
    const { stream, headers, requestId, relayed } = await openStream(
      client,
      params,
      reqOptions,
      options.onEvent,
      options.onFirstToken,
    );
    await options.onStart?.(headers, performance.now() - started);
    let message: Anthropic.Message;
    try {
      message = await stream.finalMessage();
    } finally {
      // The relay's last events go out before the call is reported ended.
      await relayed;
    }
    return {
      message: store(message),
      headers,
      requestId,
      latencyMs: performance.now() - started,
    };
  }
  const { data, response, request_id } = await client.messages
    .create({ ...params, stream: false }, reqOptions)
    .withResponse();
  await options.onStart?.(response.headers, performance.now() - started);
  return {
    message: store(data),
    headers: response.headers,
    requestId: request_id ?? null,
    latencyMs: performance.now() - started,
  };
}
