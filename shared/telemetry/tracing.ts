import {
  type Attributes,
  type Context,
  context,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type TimeInput,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import { BullMQOtel } from 'bullmq-otel';
import { VERSION } from '../version.ts';

/**
 * llmq's spans, through `@opentelemetry/api` only: without an SDK registered (the CLI registers
 * one when `OTEL_*` configures an exporter, see `sdk.ts`) every span is the API's no-op.
 */
export function tracer(): Tracer {
  return TRACER;
}

/** The API's proxy: it reaches the provider registered later, so one serves every call. */
const TRACER: Tracer = trace.getTracer('llmq', VERSION);

export type { Attributes, Context, Span };
export { SpanKind, SpanStatusCode };

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const ZERO_TRACE = '0'.repeat(32);
const ZERO_SPAN = '0'.repeat(16);

/**
 * The W3C `traceparent` of a span, to carry in job data; undefined when the span is not
 * recorded (tracing is off, or the trace was not sampled), so job data stays as it was.
 */
export function traceparentOf(span: Span): string | undefined {
  if (!span.isRecording()) return undefined;
  const c = span.spanContext();
  return `00-${c.traceId}-${c.spanId}-${(c.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
}

/** The context that continues a W3C `traceparent`; `base` when it is absent or malformed. */
export function contextOf(traceparent: string | undefined, base: Context = ROOT_CONTEXT): Context {
  const m = traceparent ? TRACEPARENT.exec(traceparent.trim().toLowerCase()) : null;
  if (!m || m[1] === ZERO_TRACE || m[2] === ZERO_SPAN) return base;
  return trace.setSpanContext(base, {
    traceId: m[1]!,
    spanId: m[2]!,
    traceFlags: Number.parseInt(m[3]!, 16),
    isRemote: true,
  });
}

/** Options of a span recorded after the fact (a wait measured by the gate). */
export interface PastSpan {
  readonly name: string;
  readonly parent: Context;
  readonly start: TimeInput;
  readonly end: TimeInput;
  readonly attributes: Attributes;
  readonly error?: string | undefined;
}

/** Records a span whose start and end are already known. */
export function recordSpan(s: PastSpan): void {
  const span = tracer().startSpan(
    s.name,
    { kind: SpanKind.INTERNAL, startTime: s.start, attributes: s.attributes },
    s.parent,
  );
  if (s.error) span.setStatus({ code: SpanStatusCode.ERROR, message: s.error });
  span.end(s.end);
}

/** Runs `fn` with `span` as the active span, so spans made inside (the SDK's) are its children. */
export function withSpan<T>(span: Span, fn: () => T): T {
  return context.with(trace.setSpan(context.active(), span), fn);
}

/**
 * Attributes without undefined values; secrets never go in (callers pass ids, models, counts).
 */
export function attributes(a: Record<string, string | number | boolean | undefined>): Attributes {
  const out: Attributes = {};
  for (const [k, v] of Object.entries(a)) if (v !== undefined) out[k] = v;
  return out;
}

let bullmqOn = false;

/**
 * Turns on BullMQ's own spans (its `telemetry` option, through `bullmq-otel`) for the queues
 * and workers opened after this: the CLI does once it has started an exporter.
 */
export function enableBullmqTelemetry(on = true): void {
  bullmqOn = on;
}

/** BullMQ's `telemetry` option when on, as a spread: `{ telemetry }` or `{}`. */
export function bullmqTelemetry(): { telemetry?: BullMQOtel } {
  return bullmqOn
    ? { telemetry: new BullMQOtel({ tracerName: 'llmq-bullmq', version: VERSION }) }
    : {};
}
