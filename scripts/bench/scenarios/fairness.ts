/**
 * Fair share between tenants: tenant a has ten times b's backlog, all at one priority, under a
 * binding token limit. Each run prints b's share of the tokens per window while both have work,
 * against its weight's share, and the wait of b's jobs (enqueue to start): FIFO, then fair
 * share with equal weights, then with weights 1:3.
 */
import { Producer } from '../../../producer/producer.ts';
import { openQueue } from '../../../shared/queues.ts';
import { createProviderClient } from '../../../worker/provider.ts';
import { startWorker } from '../../../worker/worker.ts';
import { withMock } from '../mock.ts';
import { withBenchScope } from '../redis-scope.ts';
import type { ScenarioContext, ScenarioResult } from '../report.ts';
import { percent, percentile, seconds } from '../table.ts';

interface FairRun {
  readonly mode: string;
  /** b's weight share (a weighs 1). */
  readonly target: number;
  /** b's share of the tokens started in each window while both had work. */
  readonly shares: number[];
  readonly share: number;
  readonly waitP50Ms: number;
  readonly waitMaxMs: number;
}

export async function fairnessScenario(ctx: ScenarioContext): Promise<ScenarioResult> {
  const smallJobs = ctx.smoke ? 4 : ctx.quick ? 10 : 50;
  const windowMs = 1_000;
  const limit = 1_500;
  const modes: { mode: string; weights: Record<string, number> | undefined }[] = [
    { mode: 'FIFO (fair share off)', weights: undefined },
    { mode: 'fair share, weights 1:1', weights: {} },
    { mode: 'fair share, weights 1:3', weights: { b: 3 } },
  ];
  const runs: FairRun[] = [];
  await withMock({ windowMs, limits: { tokens: limit }, latencyMs: 5 }, async (mock) => {
    for (const m of modes) {
      ctx.log(`fairness: ${m.mode}`);
      await mock.reset();
      runs.push(
        await withBenchScope(ctx.redisUrl, 'fair', async (redis, names) => {
          const producer = new Producer({ redis, names });
          const queue = openQueue(redis, names);
          const ids: string[] = [];
          const req = (text: string) => ({
            model: 'claude-bench-1',
            max_tokens: 40,
            messages: [{ role: 'user', content: text }],
          });
          for (let i = 0; i < smallJobs; i++) {
            for (let j = 0; j < 10; j++)
              ids.push(await producer.enqueue(req(`a ${i} ${j}`), { tenant: 'a' }));
            ids.push(await producer.enqueue(req(`b ${i}`), { tenant: 'b' }));
          }
          const worker = await startWorker({
            redis,
            names,
            client: createProviderClient({ apiKey: 'bench', baseURL: mock.url }),
            limiter: { windowMs, headroom: 0, limits: { tokens: limit } },
            concurrency: 4,
            ...(m.weights ? { fairShare: { weights: m.weights } } : {}),
          });
          // Until b's last job is done.
          const bIds = new Set<string>();
          const jobs = await (async () => {
            for (;;) {
              const all = await Promise.all(ids.map((id) => queue.getJob(id)));
              for (const j of all) if (j?.data.tenant === 'b') bIds.add(j.id!);
              if (all.filter((j) => j?.data.tenant === 'b').every((j) => j?.finishedOn)) return all;
              await new Promise((r) => setTimeout(r, 200));
            }
          })();
          await worker.stop(1_000);
          await producer.close();
          await queue.close();
          const started = jobs.filter((j) => j?.processedOn).map((j) => j!);
          const t0 = Math.min(...started.map((j) => j.processedOn!));
          const lastB = Math.max(
            ...started.filter((j) => bIds.has(j.id!)).map((j) => j.processedOn!),
          );
          const per = new Map<number, { a: number; b: number }>();
          for (const j of started) {
            if (j.processedOn! > lastB) continue;
            const w = Math.floor((j.processedOn! - t0) / windowMs);
            const t = per.get(w) ?? { a: 0, b: 0 };
            const tokens = j.data.cost.inputTokens + j.data.cost.outputTokens;
            if (bIds.has(j.id!)) t.b += tokens;
            else t.a += tokens;
            per.set(w, t);
          }
          const windows = [...per.entries()].sort(([x], [y]) => x - y).map(([, t]) => t);
          const sum = windows.reduce((s, t) => ({ a: s.a + t.a, b: s.b + t.b }), { a: 0, b: 0 });
          const waits = started
            .filter((j) => bIds.has(j.id!))
            .map((j) => j.processedOn! - j.timestamp);
          const wb = m.weights?.['b'] ?? 1;
          return {
            mode: m.mode,
            target: m.weights ? wb / (wb + 1) : 1 / 11,
            shares: windows.map((t) => t.b / (t.a + t.b)),
            share: sum.b / (sum.a + sum.b),
            waitP50Ms: percentile(waits, 50),
            waitMaxMs: Math.max(...waits),
          };
        }),
      );
    }
  });
  return {
    name: 'fairness',
    title: `Fair share: tenant a has 10× tenant b's backlog, one priority, ${limit} tokens per ${windowMs / 1000} s`,
    settings: { windowMs, limit, smallJobs, bigJobs: smallJobs * 10, concurrency: 4 },
    headers: [
      "b's share",
      "b's weight share",
      'per window (while both have work)',
      'b wait p50',
      'b wait max',
    ],
    rows: runs.map((r) => [
      `${r.mode}: ${percent(r.share)}`,
      r.mode.startsWith('FIFO') ? `${percent(r.target)} (arrival)` : percent(r.target),
      r.shares.map((s) => percent(s, 0)).join(' '),
      seconds(r.waitP50Ms),
      seconds(r.waitMaxMs),
    ]),
    figures: runs,
    targets: [],
    notes: [
      "Shares are of the estimated tokens of the jobs started in each window until b's last job started.",
    ],
  };
}
