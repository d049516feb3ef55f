import { context } from '@opentelemetry/api';
import type { JobData } from '../job.ts';
import {
  attributes,
  contextOf,
  type Span,
  SpanKind,
  SpanStatusCode,
  traceparentOf,
  tracer,
} from './tracing.ts';

/** GenAI semantic-convention names shared by the producer's and the worker's spans. */
export const GEN_AI = {
  system: 'gen_ai.system',
  provider: 'gen_ai.provider.name',
  operation: 'gen_ai.operation.name',
  requestModel: 'gen_ai.request.model',
  requestMaxTokens: 'gen_ai.request.max_tokens',
  responseModel: 'gen_ai.response.model',
  responseId: 'gen_ai.response.id',
  inputTokens: 'gen_ai.usage.input_tokens',
  outputTokens: 'gen_ai.usage.output_tokens',
} as const;

/**
 * Starts a job's `llmq.enqueue` span, the root of the job's part of the trace: a child of
 * `traceparent` (an HTTP request's) when given, else of the active span. Returns the span and
 * the data to store, which carries the span's traceparent when it is recorded.
 */
export function startEnqueueSpan(
  id: string,
  data: JobData,
  traceparent?: string | undefined,
): { span: Span; data: JobData } {
  const parent = contextOf(traceparent, context.active());
  const span = tracer().startSpan(
    'llmq.enqueue',
    {
      kind: SpanKind.PRODUCER,
      attributes: attributes({
        'llmq.job.id': id,
        'llmq.priority': data.priority,
        'llmq.tenant': data.tenant,
        'llmq.cost.input_tokens': data.cost.inputTokens,
        'llmq.cost.output_tokens': data.cost.outputTokens,
        [GEN_AI.requestModel]: data.request.model,
      }),
    },
    parent,
  );
  const trace = traceparentOf(span);
  return { span, data: trace ? { ...data, trace } : data };
}

/** Ends an enqueue span with whether the job was written. */
export function endEnqueueSpan(span: Span, err?: unknown, created = true): void {
  if (err) span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message });
  else if (!created) span.setAttribute('llmq.job.existing', true);
  span.end();
}
