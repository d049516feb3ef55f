/**
 * Renders docs/trace.png: one job's real trace (two jobs against a small output-token budget,
 * so the second waits), captured with an in-memory exporter and drawn as a waterfall in
 * headless Chromium. Needs Redis (REDIS_URL) and /usr/bin/chromium:
 * `node --import tsx scripts/dev/trace-picture.ts`.
 */
import { writeFileSync } from 'node:fs';
import {
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { Redis } from 'ioredis';
import { chromium } from 'playwright-core';
import { Producer } from '../../producer/producer.ts';
import { deleteKeysMatching } from '../../shared/redis.ts';
import { startMockAnthropic } from '../../testing/mock-anthropic/index.ts';
import { createProviderClient } from '../../worker/provider.ts';
import { startWorker } from '../../worker/worker.ts';

const exporter = new InMemorySpanExporter();
new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }).register();

const redis = new Redis(process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379', {
  maxRetriesPerRequest: null,
});
const names = { prefix: `llmq-trace-picture-${process.pid}`, queue: 'jobs' };
const mock = await startMockAnthropic({ latencyMs: 300, outputShare: 1 });
const producer = new Producer({ redis, names });
const worker = await startWorker({
  redis: redis.duplicate(),
  names,
  client: createProviderClient({ apiKey: 'sk-picture', baseURL: mock.url }),
  limiter: { limits: { outputTokens: 300 }, windowMs: 1_500, headroom: 0 },
});
const request = (text: string) => ({
  model: 'claude-haiku-4-5',
  max_tokens: 200,
  messages: [{ role: 'user', content: text }],
});
await producer.enqueue(request('First.'), { tenant: 'acme' });
const id = await producer.enqueue(request('Second: this one waits.'), {
  tenant: 'acme',
  traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
});
const traceOf = () =>
  exporter.getFinishedSpans().filter((s) => s.spanContext().traceId.startsWith('4bf92f'));
while (!traceOf().some((s) => s.name === 'llmq.settle'))
  await new Promise((r) => setTimeout(r, 50));
await worker.stop();
await producer.close();
await mock.close();
await deleteKeysMatching(redis, `${names.prefix}:*`);
redis.disconnect();

const ms = (t: [number, number]) => t[0] * 1_000 + t[1] / 1e6;
const spans = traceOf().sort((a, b) => ms(a.startTime) - ms(b.startTime));
const t0 = ms(spans[0]!.startTime);
const total = Math.max(...spans.map((s) => ms(s.endTime))) - t0;
const label = (s: ReadableSpan) => {
  const a = s.attributes;
  if (s.name === 'llmq.wait')
    return `wait: ${a['llmq.wait.reason']} (${a['llmq.wait.scope']} ${a['llmq.wait.dimension']})`;
  if (s.name.startsWith('chat '))
    return `${s.name} · ${a['gen_ai.usage.input_tokens']} in / ${a['gen_ai.usage.output_tokens']} out`;
  return s.name;
};
const rows = spans
  .map((s) => {
    const left = ((ms(s.startTime) - t0) / total) * 100;
    const width = Math.max(0.4, ((ms(s.endTime) - ms(s.startTime)) / total) * 100);
    const dur = Math.round(ms(s.endTime) - ms(s.startTime));
    const kind = s.name.startsWith('chat ') ? 'chat' : (s.name.split('.')[1] ?? s.name);
    return `<tr><td>${label(s)}</td><td class="lane"><div class="bar ${kind}" style="left:${left}%;width:${width}%"></div></td><td class="n">${dur} ms</td></tr>`;
  })
  .join('');
const html = `<!doctype html><meta charset="utf-8"><style>
body{font:13px system-ui,sans-serif;margin:16px;color:#222}h1{font-size:15px;margin:0 0 8px}
table{border-collapse:collapse;width:860px}td{padding:4px 6px;border-bottom:1px solid #eee;white-space:nowrap}
.lane{width:420px;position:relative}.bar{position:absolute;top:6px;height:12px;border-radius:2px;background:#7a8ca3}
.wait{background:#e0a030}.chat{background:#4a7bd0}.messages{background:#9ab6e6}.settle{background:#3a9a5a}.enqueue{background:#8a6ac0}
.n{text-align:right;color:#555}</style>
<h1>job ${id}: trace 4bf92f…4736 (continued from the caller's traceparent), ${Math.round(total)} ms</h1>
<table>${rows}</table>`;
writeFileSync('/tmp/llmq-trace.html', html);
const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox'],
});
const page = await browser.newPage({ viewport: { width: 900, height: 100 } });
await page.setContent(html);
await page.screenshot({
  path: new URL('../../docs/trace.png', import.meta.url).pathname,
  fullPage: true,
});
await browser.close();
console.log(
  spans.map((s) => `${label(s)} ${Math.round(ms(s.endTime) - ms(s.startTime))} ms`).join('\n'),
);
process.exit(0);
