import { describe, expect, it } from 'vitest';
import { createLogger, logLevel, readableLine } from '../shared/telemetry/logger.ts';
import {
  API_KEY,
  allCompleted,
  poolsPerTest,
  request,
  runCli,
  startCli,
} from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const openTestPool = poolsPerTest();

/** Every stderr line as JSON (throws on a line that is not). */
const jsonLines = (text: string) =>
  text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>);

describe('logs', () => {
  it('the worker writes JSON lines, one per job outcome, and each job’s history to its log', async () => {
    const pool = await openTestPool('logs', { latencyMs: 20, outputShare: 1 });
    // Two jobs against a 50-token window: the second waits for the first's output budget.
    const env = pool.cliEnv({ LLMQ_OTPM: '50', LLMQ_WINDOW_S: '1', LLMQ_LOG_LEVEL: 'info' });
    const worker = startCli(['worker'], env);
    try {
      const ids = [
        await pool.producer.enqueue(request('First, please.', 40), { tenant: 'acme' }),
        await pool.producer.enqueue(request('Second, please.', 40), { tenant: 'acme' }),
      ];
      await allCompleted(pool, ids, 30_000);
      await until(() => (worker.stderr().match(/job completed/g) ?? []).length === 2, 10_000);
      const lines = jsonLines(worker.stderr());
      expect(lines[0]).toMatchObject({ level: 'info', component: 'worker', msg: 'worker started' });
      for (const id of ids) {
        const done = lines.find((l) => l['msg'] === 'job completed' && l['job'] === id);
        expect(done).toMatchObject({
          tenant: 'acme',
          model: 'claude-test-1',
          inputTokens: expect.any(Number),
          outputTokens: 40,
          waitMs: expect.any(Number),
          callMs: expect.any(Number),
          attempts: 1,
          requestId: expect.stringMatching(/^req_/),
        });
        expect(typeof done!['time']).toBe('string');
      }
      expect(worker.stderr()).not.toContain(API_KEY);

      // The job's own log (Bull Board's Logs tab): why it waited, then the call.
      await until(async () => (await pool!.queue.getJobLogs(ids[1]!)).count >= 2, 5_000);
      const { logs } = await pool.queue.getJobLogs(ids[1]!);
      expect(logs[0]).toMatch(/admitted after .* \(gate: .*budget \(global outputTokens\) /);
      expect(logs[1]).toMatch(/call ok in .*: \d+ input, 40 output tokens \(request req_/);
    } finally {
      await worker.kill('SIGTERM');
    }
  });

  it('LLMQ_LOG_LEVEL picks the level; a bad one is one clear line and a non-zero exit', async () => {
    expect(logLevel(undefined, { LLMQ_LOG_LEVEL: 'WARN' })).toBe('warn');
    expect(logLevel(undefined, {})).toBe('info');
    const pool = await openTestPool('logsbad');
    const bad = await runCli(['worker'], pool.cliEnv({ LLMQ_LOG_LEVEL: 'loud' }));
    expect(bad.code).not.toBe(0);
    expect(bad.stderr.trim().split('\n')).toHaveLength(1);
    expect(bad.stderr).toContain('LLMQ_LOG_LEVEL must be one of fatal, error, warn, info');
    expect(bad.stderr).toContain('"loud"');
  });

  it('redacts keys, and reads well on a terminal', () => {
    const out: string[] = [];
    const log = createLogger({
      component: 'test',
      level: 'debug',
      destination: { write: (l: string) => out.push(l) },
    });
    log.info({ apiKey: 'sk-secret', headers: { authorization: 'Bearer x' }, job: '7' }, 'hello');
    expect(out[0]).not.toContain('sk-secret');
    expect(out[0]).not.toContain('Bearer x');
    const line = readableLine(out[0]!);
    expect(line).toMatch(/^\d\d:\d\d:\d\d\.\d{3} INFO {2}\[test\] hello .*job=7/);
  });
});
