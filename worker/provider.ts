import Anthropic from '@anthropic-ai/sdk';
import type { StoredMessage } from '../shared/job.ts';
import type { HeaderSource } from '../shared/limiter/provider-headers.ts';
import type { MessagesRequest } from '../shared/request.ts';

/** Builds the SDK client llmq uses: the SDK's own retries are off (retries live in one layer). */
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

export interface ProviderCallOptions {
  /** Stream the response: its headers arrive as soon as the provider admits the call. */
  readonly stream: boolean;
  readonly timeoutMs: number;
  readonly signal?: AbortSignal | undefined;
  /** Called once the response has begun (headers in hand), before the body is read. */
  readonly onStart?: ((headers: HeaderSource) => Promise<void>) | undefined;
  /** Extra request headers (the caller's `anthropic-version`, `anthropic-beta`). */
  readonly headers?: Readonly<Record<string, string>> | undefined;
  /** Every stream event as it arrives: its SSE name and its data (JSON text). */
  readonly onEvent?: ((name: string, data: string) => void) | undefined;
}

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
 */
export type ProviderCaller = (
  request: MessagesRequest,
  options: ProviderCallOptions,
) => Promise<ProviderCallResult>;

/** One call of the Messages API through the SDK; errors are the SDK's, for classification. */
export async function callProvider(
  client: Anthropic,
  request: MessagesRequest,
  options: ProviderCallOptions,
): Promise<ProviderCallResult> {
  const started = performance.now();
  const reqOptions = {
    timeout: options.timeoutMs,
    ...(options.signal ? { signal: options.signal } : {}),
    ...(options.headers ? { headers: { ...options.headers } } : {}),
  };
  const params = request as unknown as Anthropic.MessageCreateParamsNonStreaming;
  if (options.stream) {
    const stream = client.messages.stream(
      { ...params, stream: true } as unknown as Anthropic.MessageStreamParams,
      reqOptions,
    );
    // Keep an unhandled rejection from escaping while we wait for the headers.
    stream.on('error', () => {});
    const onEvent = options.onEvent;
    // The event's name is its `type`; serialized at once, before the SDK's accumulation reuses it.
    if (onEvent) stream.on('streamEvent', (event) => onEvent(event.type, JSON.stringify(event)));
    const { response, request_id } = await stream.withResponse();
    await options.onStart?.(response.headers);
    const message = await stream.finalMessage();
    return {
      message: store(message),
      headers: response.headers,
      requestId: request_id ?? null,
      latencyMs: performance.now() - started,
    };
  }
  const { data, response, request_id } = await client.messages
    .create({ ...params, stream: false }, reqOptions)
    .withResponse();
  await options.onStart?.(response.headers);
  return {
    message: store(data),
    headers: response.headers,
    requestId: request_id ?? null,
    latencyMs: performance.now() - started,
  };
}
