/**
 * The mock server in a process of its own, as a provider would be: the bench's clients and
 * workers do not share an event loop with it. Options as JSON in `LLMQ_BENCH_MOCK`; prints the
 * URL alone on its first line; closes on SIGTERM or when its parent goes away (stdin closes).
 */
import { startMockAnthropic } from '../../testing/mock-anthropic/index.ts';

const mock = await startMockAnthropic(JSON.parse(process.env['LLMQ_BENCH_MOCK'] ?? '{}'));
process.stdout.write(`${mock.url}\n`);
const close = () => {
  mock.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.once('SIGTERM', close);
process.once('SIGINT', close);
process.stdin.on('end', close).resume();
