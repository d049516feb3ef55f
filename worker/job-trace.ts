import { ROOT_CONTEXT, trace } from '@opentelemetry/api';
import type { Job } from 'bullmq';
import type { JobData, JobResult } from '../shared/job.ts';
import { GEN_AI } from '../shared/telemetry/job-spans.ts';
import {
  attributes,
  type Context,
  contextOf,
  recordSpan,
  type Span,
  SpanKind,
  SpanStatusCode,
  tracer,
  withSpan,
} from '../shared/telemetry/tracing.ts';
import type { WaitSegment } from './gate-waits.ts';
import type { ProviderCallResult } from './provider.ts';

/** What a failed call tells its span. */
export interface CallFailure {
  readonly status?: number | undefined;
  readonly errorClass?: string | undefined;
  readonly reason: string;
  readonly requestId?: string | null | undefined;
}

/**
 * One try of a job, as spans in the job's trace (a child of its enqueue span): the gate's waits,
 * the provider call (GenAI conventions; the SDK's own span nests inside it) and the settle.
 * Only jobs enqueued while tracing was on carry a traceparent; the others get no JobTrace.
 */
export class JobTrace {
  private call: Span | undefined;

  private constructor(
    private readonly parent: Context,
    private readonly job: Job<JobData, JobResult>,
    /** This try's own root, for a job enqueued without tracing. */
    private readonly root?: Span,
  ) {}

  /**
   * A trace for this try of `job`, its waits recorded; undefined when tracing is off. A job
   * enqueued while tracing was off gets a trace of its own for the try (`llmq.job`).
   */
  static begin(
    job: Job<JobData, JobResult>,
    waits: readonly WaitSegment[] | undefined,
  ): JobTrace | undefined {
    let t: JobTrace;
    if (job.data.trace) t = new JobTrace(contextOf(job.data.trace), job);
    else {
      // The API's no-op span when no SDK is registered: one small object, nothing recorded.
      const root = tracer().startSpan(
        'llmq.job',
        {
          kind: SpanKind.CONSUMER,
          startTime: waits?.[0]?.start ?? Date.now(),
          attributes: attributes({ 'llmq.job.id': job.id, 'llmq.tenant': job.data.tenant }),
        },
        ROOT_CONTEXT,
      );
      if (!root.isRecording()) return undefined;
      t = new JobTrace(trace.setSpan(ROOT_CONTEXT, root), job, root);
    }
    for (const w of waits ?? []) {
      recordSpan({
        name: 'llmq.wait',
        parent: t.parent,
        start: w.start,
        end: w.end,
        attributes: attributes({
          'llmq.job.id': job.id,
          'llmq.wait.reason': w.reason,
          'llmq.wait.scope': w.scope,
          'llmq.wait.dimension': w.dimension,
          'llmq.wait.ms': w.end - w.start,
        }),
      });
    }
    return t;
  }

  /** Runs the provider call inside its span. */
  around<T>(fn: () => Promise<T>): Promise<T> {
    const d = this.job.data;
    this.call = tracer().startSpan(
      `chat ${d.request.model}`,
      {
        kind: SpanKind.CLIENT,
        attributes: attributes({
          'llmq.job.id': this.job.id,
          'llmq.tenant': d.tenant,
          'llmq.attempt': (d.history?.length ?? 0) + 1,
          [GEN_AI.system]: 'anthropic',
          [GEN_AI.provider]: 'anthropic',
          [GEN_AI.operation]: 'chat',
          [GEN_AI.requestModel]: d.request.model,
          [GEN_AI.requestMaxTokens]: d.request.max_tokens,
        }),
      },
      this.parent,
    );
    return withSpan(this.call, fn);
  }

  /** The call succeeded. */
  ok(res: ProviderCallResult): void {
    const s = this.call;
    if (!s) return;
    const u = res.message.usage;
    s.setAttributes(
      attributes({
        [GEN_AI.responseModel]: res.message.model,
        [GEN_AI.responseId]: res.message.id,
        [GEN_AI.inputTokens]: u.input_tokens,
        [GEN_AI.outputTokens]: u.output_tokens,
        'llmq.provider.request_id': res.requestId ?? undefined,
        'http.response.status_code': 200,
      }),
    );
    s.setStatus({ code: SpanStatusCode.OK });
    s.end();
    this.root?.end();
  }

  /** The call failed. */
  failed(f: CallFailure): void {
    const s = this.call;
    if (!s) return;
    s.setAttributes(
      attributes({
        'http.response.status_code': f.status,
        'error.type': f.errorClass ?? 'Error',
        'llmq.provider.request_id': f.requestId ?? undefined,
      }),
    );
    s.setStatus({ code: SpanStatusCode.ERROR, message: f.reason });
    s.end();
    this.root?.end();
  }

  /** The settle of the reservation with the usage, from `start` to now. */
  settled(start: number, actual: { inputTokens: number; outputTokens: number }, err?: unknown) {
    const c = this.job.data.cost;
    recordSpan({
      name: 'llmq.settle',
      parent: this.parent,
      start,
      end: Date.now(),
      attributes: {
        'llmq.job.id': this.job.id ?? '',
        'llmq.reserved.input_tokens': c.inputTokens,
        'llmq.reserved.output_tokens': c.outputTokens,
        'llmq.actual.input_tokens': actual.inputTokens,
        'llmq.actual.output_tokens': actual.outputTokens,
      },
      error: err ? (err as Error).message : undefined,
    });
  }
}

/** What happened to a job after a failed call, as a span of its trace. */
export function traceOutcome(
  job: Job<JobData, JobResult>,
  what: 'llmq.retry' | 'llmq.requeue' | 'llmq.move' | 'llmq.dead_letter',
  attrs: Record<string, string | number | undefined>,
): void {
  if (!job.data.trace) return;
  const now = Date.now();
  recordSpan({
    name: what,
    parent: contextOf(job.data.trace),
    start: now,
    end: now,
    attributes: attributes({ 'llmq.job.id': job.id, ...attrs }),
    error:
      what === 'llmq.dead_letter' ? String(attrs['llmq.reason'] ?? 'dead-lettered') : undefined,
  });
}
