import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { runBench, SCENARIOS } from '../scripts/bench/index.ts';
import { registerBenchCommand } from '../scripts/cli/bench.ts';
import { ConfigError } from '../shared/errors.ts';
import { REDIS_URL } from './helpers.ts';

describe('llmq bench', () => {
  it('runs the published scenario and prints one table with every client side by side', async () => {
    const printed: string[] = [];
    const report = await runBench({
      scenarios: ['published'],
      smoke: true,
      redisUrl: REDIS_URL,
      print: (t) => printed.push(t),
      log: () => {},
    });
    const text = printed.join('\n');
    for (const header of [
      'client',
      'completed',
      '429s',
      'attempts',
      'wall',
      'worst window / limit',
      'utilization',
      'wall / ideal',
      'wall / fluid',
    ]) {
      expect(text).toContain(header);
    }
    for (const client of [
      'Semaphore(10) only',
      'token bucket, full start',
      'token bucket sized',
      'client sliding window',
      'llmq (1 worker, concurrency 10), sliding window',
      'llmq (1 worker, concurrency 10), token bucket',
    ]) {
      expect(text).toContain(client);
    }
    // The article's figures are printed beside the measured ones.
    expect(text).toContain('36/60, 82, 15.4 s');
    const [scenario] = report.scenarios;
    expect(scenario?.name).toBe('published');
    // The article's four clients, then llmq against each shape.
    expect(scenario?.rows).toHaveLength(6);
    expect(scenario?.figures).toHaveLength(6);
    for (const row of scenario!.figures as {
      completed: number;
      attempts: number;
      total: number;
    }[]) {
      expect(row.total).toBeGreaterThan(0);
      expect(row.attempts).toBeGreaterThanOrEqual(row.completed);
    }
    expect(scenario?.targets.map((t) => t.name)).toEqual(
      expect.arrayContaining([
        "sliding window: llmq within 2% of the budget's minimum",
        "token bucket: llmq's admissions span within 5% of the bucket's minimum",
      ]),
    );
  });

  it('runs the API-shaped scenarios on both shapes: a cached prompt, PDFs, limits from headers', async () => {
    const report = await runBench({
      scenarios: ['cached', 'documents', 'unconfigured'],
      smoke: true,
      redisUrl: REDIS_URL,
      print: () => {},
      log: () => {},
    });
    expect(report.scenarios.map((s) => s.name)).toEqual(['cached', 'documents', 'unconfigured']);
    for (const s of report.scenarios) {
      const figures = s.figures as { client: string; completed: number }[];
      expect(figures.map((f) => f.client)).toEqual(['llmq, sliding window', 'llmq, token bucket']);
      const total = s.name === 'cached' ? 12 : s.name === 'documents' ? 8 : 24;
      for (const f of figures) expect(f.completed).toBe(total);
    }
    // One job wrote the shared prefix on each shape; the others read it.
    const cached = report.scenarios[0]!.figures as { cache: { writes: number; reads: number } }[];
    expect(cached.map((f) => f.cache)).toEqual([
      expect.objectContaining({ writes: 1, reads: 11 }),
      expect.objectContaining({ writes: 1, reads: 11 }),
    ]);
  }, 180_000);

  it('runs the http scenario against llmq serve in its own process: no 5xx, no lost job', async () => {
    const printed: string[] = [];
    const report = await runBench({
      scenarios: ['http'],
      smoke: true,
      redisUrl: REDIS_URL,
      print: (t) => printed.push(t),
      log: () => {},
    });
    const [scenario] = report.scenarios;
    expect(scenario?.name).toBe('http');
    const [row] = scenario!.figures as {
      requests: number;
      accepted: number;
      acceptedUnique: number;
      missing: string[];
      byStatus: Record<string, number>;
      servePeakRssBytes: number | null;
    }[];
    expect(row!.accepted).toBeGreaterThan(0);
    expect(row!.acceptedUnique).toBe(row!.accepted);
    expect(row!.missing).toEqual([]);
    expect(row!.byStatus['202']).toBe(row!.accepted);
    expect(row!.servePeakRssBytes).toBeGreaterThan(0);
    expect(scenario!.targets.map((t) => [t.name, t.met])).toEqual([
      ['no 5xx answer', true],
      ['no lost job (every 202 id is in the queue)', true],
    ]);
    expect(printed.join('\n')).toContain('serve peak RSS');
  }, 120_000);

  it('runs the pool scenario: three platforms, one killed and back, one silent; every job completed once', async () => {
    const report = await runBench({
      scenarios: ['pool'],
      smoke: true,
      redisUrl: REDIS_URL,
      print: () => {},
      log: () => {},
    });
    const [scenario] = report.scenarios;
    expect(scenario?.name).toBe('pool');
    expect(scenario!.rows.map((r) => `${r[0]} ${r[1]}`)).toEqual([
      ...['throughput', 'failover'].flatMap((p) =>
        ['claude', 'bedrock', 'vertex', 'pool'].map((d) => `${p} ${d}`),
      ),
      'hang steady',
      'hang silent',
      'hang alone default',
    ]);
    type Ends = { jobs: number; completedOnce: number; dead: number; failed: number };
    const [{ throughput }, { failover }, { hang }, { hangAlone }] = scenario!.figures as [
      { throughput: { failed: number } },
      { failover: Ends },
      { hang: Ends & { silentCalls: number } },
      { hangAlone: Ends & { silentTries: number; attemptsSpent: number } },
    ];
    expect(throughput.failed).toBe(0);
    for (const phase of [failover, hang, hangAlone]) {
      expect(phase.completedOnce).toBe(phase.jobs);
      expect([phase.dead, phase.failed]).toEqual([0, 0]);
    }
    // The silent provider was called, and its calls were aborted and retried, no attempt spent.
    expect(hang.silentCalls).toBeGreaterThan(0);
    expect(hangAlone.silentTries).toBeGreaterThan(0);
    expect(hangAlone.attemptsSpent).toBe(0);
    expect(scenario!.targets.map((t) => t.name)).toContain('it rejoins after its trial call');
  }, 180_000);

  it('refuses an unknown scenario with a message naming the choices', async () => {
    const program = new Command('llmq').exitOverride();
    registerBenchCommand(program);
    const run = program.parseAsync(['bench', '--scenario', 'nope'], { from: 'user' });
    await expect(run).rejects.toBeInstanceOf(ConfigError);
    await expect(run).rejects.toThrow(
      `--scenario must be one of ${Object.keys(SCENARIOS).join(', ')}, got "nope"`,
    );
  });
});
