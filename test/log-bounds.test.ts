import { createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { startPrivateRedis } from '../shared/private-redis.ts';
import { createLogger, workerLogger } from '../shared/telemetry/logger.ts';
import { openPool, type Pool, request, startCli } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const closers: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close().catch(() => {});
});

/** A JSON logger whose lines land in `lines`. */
function collected(component: string) {
  const lines: string[] = [];
  const log = createLogger({
    component,
    level: 'info',
    destination: { write: (l) => lines.push(l) },
  });
  return { log, lines };
}

describe('what the logs hold', () => {
  it('a client-supplied string is logged capped, not whole', () => {
    const { log, lines } = collected('test');
    log.warn(
      { model: 'm'.repeat(100_000), nested: { text: 't'.repeat(5_000) } },
      `asked ${'x'.repeat(50_000)}`,
    );
    expect(lines).toHaveLength(1);
    expect(lines[0]!.length).toBeLessThan(1_500);
    const o = JSON.parse(lines[0]!);
    expect(o.model).toMatch(/^m{256}… \(100000 chars\)$/);
    expect(o.nested.text).toMatch(/… \(5000 chars\)$/);
    expect(o.msg).toMatch(/… \(50006 chars\)$/);
  });

  it("a worker's lines about a job with a 100 KB model name stay short", async () => {
    const pool: Pool = await openPool('logcap');
    closers.push(() => pool.cleanup());
    const { log, lines } = collected('worker');
    await pool.worker({ logger: workerLogger(log) });
    const model = `claude-${'x'.repeat(100_000)}`;
    const id = await pool.producer.enqueue(request('hi', 20, model));
    await until(
      async () => lines.some((l) => l.includes(id) && /completed|dead-letter|failed/.test(l)),
      20_000,
    );
    const about = lines.filter((l) => l.includes(id));
    expect(about.length).toBeGreaterThan(0);
    for (const l of about) {
      expect(l.length).toBeLessThan(3_000);
      expect(l).toContain('(100007 chars)');
    }
  });

  it('Redis lost: the worker logs one JSON line per error, with its message and code, no stack', async () => {
    const redis = await startPrivateRedis();
    closers.push(() => redis.stop());
    const worker = startCli(['worker'], {
      ...process.env,
      REDIS_URL: redis.url,
      ANTHROPIC_API_KEY: 'sk-unused',
      ANTHROPIC_BASE_URL: 'http://127.0.0.1:9',
      LLMQ_LOG_LEVEL: 'info',
    });
    closers.push(() => worker.kill('SIGKILL'));
    await until(() => worker.stderr().includes('worker started'), 60_000);
    await redis.stop();
    // The worker's own client refused, not only BullMQ's (each reconnects on its own backoff).
    const refused = (msg: string) =>
      worker
        .stderr()
        .split('\n')
        .some((l) => l.includes(`"msg":"${msg}"`) && l.includes('ECONNREFUSED'));
    await until(
      () => refused('redis error') && worker.stderr().includes('"msg":"bullmq error"'),
      30_000,
    );
    // Its port now takes connections and drops them: the worker's reconnects can be counted.
    let attempts = 0;
    const trap = createServer((socket) => {
      attempts++;
      socket.destroy();
    });
    trap.listen(redis.port, '127.0.0.1');
    closers.push(async () => trap.close());
    await until(() => attempts >= 10, 30_000);
    const lines = worker.stderr().trim().split('\n');
    for (const line of lines) {
      expect(() => JSON.parse(line), line.slice(0, 200)).not.toThrow();
      expect(line).not.toMatch(/\s+at \S+ \(/);
    }
    const errors = lines.map((l) => JSON.parse(l)).filter((o) => o.msg === 'redis error');
    // Redis going away may first read as a reset, then each reconnect is refused.
    for (const e of errors) expect(e.error).toContain(e.code);
    expect(errors.map((o) => o.code)).toContain('ECONNREFUSED');
    // The same error again and again is one line (a minute at most), not one per reconnect.
    const messages = errors.map((o) => o.error);
    expect(messages).toEqual([...new Set(messages)]);
  });
});
