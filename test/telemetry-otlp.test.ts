import { createServer, type Server } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { tracesExporterOf } from '../shared/telemetry/sdk.ts';
import {
  allCompleted,
  openPool,
  type Pool,
  request,
  runCli,
  startCli,
} from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

let pool: Pool | undefined;
let collector: Server | undefined;
afterEach(async () => {
  await pool?.cleanup();
  await new Promise((r) => (collector ? collector.close(r) : r(undefined)));
  pool = undefined;
  collector = undefined;
});

describe('tracing from the standard OTEL_* variables', () => {
  it('is off unless they configure an exporter', () => {
    expect(tracesExporterOf({})).toBeUndefined();
    expect(tracesExporterOf({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' })).toBe('otlp');
    expect(tracesExporterOf({ OTEL_TRACES_EXPORTER: 'console' })).toBe('console');
    expect(
      tracesExporterOf({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'true' }),
    ).toBeUndefined();
    expect(tracesExporterOf({ OTEL_TRACES_EXPORTER: 'none' })).toBeUndefined();
    expect(() => tracesExporterOf({ OTEL_TRACES_EXPORTER: 'zipkin' })).toThrow(
      'OTEL_TRACES_EXPORTER must be otlp, console or none, got "zipkin"',
    );
  });

  it('llmq worker sends its spans to the OTLP endpoint, with the GenAI attributes', async () => {
    const bodies: Buffer[] = [];
    collector = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        if (req.url === '/v1/traces') bodies.push(Buffer.concat(chunks));
        res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
      });
    });
    await new Promise<void>((r) => collector!.listen(0, '127.0.0.1', r));
    const port = (collector.address() as { port: number }).port;
    pool = await openPool('otlp', { latencyMs: 10 });
    const env = pool.cliEnv({
      LLMQ_TPM: '100000',
      OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
      OTEL_SERVICE_NAME: 'llmq-otlp-test',
      OTEL_BSP_SCHEDULE_DELAY: '100',
    });
    const worker = startCli(['worker'], env);
    try {
      const id = await pool.producer.enqueue(request('Trace me.', 20));
      await allCompleted(pool, [id], 30_000);
      // Protobuf keeps strings as they are: the span names and attribute keys are readable.
      const seen = () => Buffer.concat(bodies).toString('latin1');
      await until(() => seen().includes('chat claude-test-1'), 10_000);
      expect(seen()).toContain('llmq-otlp-test');
      expect(seen()).toContain('llmq.job');
      expect(seen()).toContain('gen_ai.usage.output_tokens');
      expect(seen()).toContain(id);
    } finally {
      expect(await worker.kill('SIGTERM')).toBe(0);
    }
    // A bad exporter name: one line, non-zero.
    const bad = await runCli(['worker'], { ...env, OTEL_TRACES_EXPORTER: 'zipkin' });
    expect(bad.code).not.toBe(0);
    expect(bad.stderr.trim().split('\n')).toHaveLength(1);
  });
});
