/**
 * Starts OpenTelemetry's trace SDK in a CLI process when the standard variables ask for it:
 * `OTEL_TRACES_EXPORTER` (`otlp`, `console` or `none`) or an `OTEL_EXPORTER_OTLP_ENDPOINT` /
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; `OTEL_SDK_DISABLED=true` keeps it off. The exporter
 * reads its own variables (endpoint, headers, protocol); `OTEL_SERVICE_NAME` names the service.
 * Loaded with `import()` only then: library code sees `@opentelemetry/api` alone.
 */

import { ConfigError } from '../errors.ts';

export type TracingEnv = Readonly<Record<string, string | undefined>>;

/** Which exporter the variables configure; undefined for none. */
export function tracesExporterOf(env: TracingEnv): 'otlp' | 'console' | undefined {
  if (env['OTEL_SDK_DISABLED']?.toLowerCase() === 'true') return undefined;
  const named = env['OTEL_TRACES_EXPORTER']?.split(',')[0]?.trim().toLowerCase();
  if (named === 'none') return undefined;
  if (named === 'console') return 'console';
  if (named === 'otlp') return 'otlp';
  if (named) {
    throw new ConfigError(
      `OTEL_TRACES_EXPORTER must be otlp, console or none, got ${JSON.stringify(named)}: unset it to turn tracing off`,
    );
  }
  return env['OTEL_EXPORTER_OTLP_ENDPOINT'] || env['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT']
    ? 'otlp'
    : undefined;
}

/** Stops tracing, sending what is buffered. */
export type StopTracing = () => Promise<void>;

/**
 * Registers a tracer provider with the configured exporter (batched), W3C propagation and an
 * async-hooks context, plus BullMQ's own spans; resolves with how to stop it, or undefined
 * when the variables configure no exporter.
 */
export async function startTracing(
  serviceName: string,
  env: TracingEnv = process.env,
): Promise<StopTracing | undefined> {
  const kind = tracesExporterOf(env);
  if (!kind) return undefined;
  const [{ NodeTracerProvider }, base, { resourceFromAttributes }] = await Promise.all([
    import('@opentelemetry/sdk-trace-node'),
    import('@opentelemetry/sdk-trace-base'),
    import('@opentelemetry/resources'),
  ]);
  const exporter =
    kind === 'console'
      ? new base.ConsoleSpanExporter()
      : new (await import('@opentelemetry/exporter-trace-otlp-http')).OTLPTraceExporter();
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({
      'service.name': env['OTEL_SERVICE_NAME'] || serviceName,
    }),
    spanProcessors: [new base.BatchSpanProcessor(exporter)],
  });
  provider.register();
  const { enableBullmqTelemetry } = await import('./tracing.ts');
  enableBullmqTelemetry();
  return () => provider.shutdown();
}
