import Anthropic from '@anthropic-ai/sdk';
import type { CallRecorder } from '../recorder.ts';
import type { BenchRequest } from '../workload.ts';
import { estimateInputTokens, Semaphore, type TokenLimiter } from './primitives.ts';

export interface BaselineOptions {
  readonly mockUrl: string;
  readonly requests: readonly BenchRequest[];
  /** Reserve estimated input + max_tokens here before each call; none for "Semaphore only". */
  readonly limiter?: TokenLimiter | undefined;
  /** A Semaphore of this size around each call (after the limiter); none when absent. */
  readonly concurrency?: number | undefined;
  readonly recorder: CallRecorder;
}

export interface ClientRun {
  readonly completed: number;
  readonly failed: number;
  /** From the first call's start to the last call's end (success or failure), ms. */
  readonly wallMs: number;
  /** Error messages of failed calls, by message, for the notes. */
  readonly errors: Record<string, number>;
}

/**
 * Runs one of the article's clients: every call started at once (asyncio.gather), each reserving
 * `estimate_input_tokens(messages) + max_tokens` from its limiter (the article's
 * `create_limited`), then, when a concurrency is given, taking a slot of a Semaphore (the
 * article's LLMGateway: tokens first, then the slot), then `client.messages.create` with the SDK's
 * DEFAULT retries (maxRetries 2, honouring retry-after).
 */
export async function runBaselineClient(options: BaselineOptions): Promise<ClientRun> {
  const client = new Anthropic({
    apiKey: 'bench-key',
    baseURL: options.mockUrl,
    fetch: options.recorder.fetch,
  });
  const sem = options.concurrency === undefined ? undefined : new Semaphore(options.concurrency);
  const errors: Record<string, number> = {};
  let completed = 0;
  let failed = 0;
  const t0 = performance.now();
  let last = t0;
  await Promise.all(
    options.requests.map(async (req) => {
      try {
        await options.limiter?.acquire(estimateInputTokens(req.messages) + req.max_tokens);
        const call = () =>
          client.messages.create(req as unknown as Anthropic.MessageCreateParamsNonStreaming);
        await (sem ? sem.run(call) : call());
        completed++;
      } catch (err) {
        failed++;
        const key =
          err instanceof Anthropic.APIError
            ? `${err.status ?? 'error'} ${err.constructor.name}`
            : String(err);
        errors[key] = (errors[key] ?? 0) + 1;
      } finally {
        last = Math.max(last, performance.now());
      }
    }),
  );
  return { completed, failed, wallMs: last - t0, errors };
}
