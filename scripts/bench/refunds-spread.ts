/**
 * Why the refunds scenario lands at ~15 s or ~21 s from run to run: the same run (150 calls of
 * 207 tokens, 4,000 per 10 s, unused output given back, 10 at once) with and without the
 * provider's headers fed to the limiter, `runs` times each, with the foreign spend the limiter
 * counted meanwhile (no other client exists).
 *
 *   LLMQ_FROM_SOURCE=1 node --import tsx scripts/bench/refunds-spread.ts [runs]
 */
import { resolveConfig } from '../../shared/config.ts';
import { runLlmq, tokenBudget } from './llmq-runner.ts';
import { withMock } from './mock.ts';
import { latencyFor, shortCall } from './workload.ts';

const runs = Number(process.argv[2] ?? 3);
const { redisUrl } = resolveConfig({ flags: {}, env: process.env });
const latency = latencyFor(false);
const requests = Array.from({ length: 150 }, (_, i) => shortCall(i));
const mockOptions = {
  windowMs: 10_000,
  limits: { tokens: 4_000 },
  outputAccounting: 'actual' as const,
  latencyMs: latency.baseMs,
  latencyPerOutputTokenMs: latency.perTokenMs,
  outputShare: 0.2,
};
await withMock(mockOptions, async (mock) => {
  for (let i = 0; i < runs; i++) {
    for (const feedback of [true, false]) {
      await mock.reset();
      const run = await runLlmq({
        redisUrl,
        scope: 'refunds-spread',
        mockUrl: mock.url,
        requests,
        ...tokenBudget(10_000, 4_000, 10, 'actual'),
        workers: { count: 1, where: 'in-process' },
        concurrency: 10,
        feedback,
        recordOutput: true,
        watchLimiter: true,
      });
      const at = run.calls.admitted.map((c) => c.at - run.calls.admitted[0]!.at);
      const inWindow1 = at.filter((t) => t < 10_000).length;
      const w = run.limiterWatch;
      process.stdout.write(
        `${JSON.stringify({
          feedback,
          wallMs: run.wallMs,
          rateLimited: run.calls.statuses['429'] ?? 0,
          admittedInFirstWindow: inWindow1,
          lastAdmissionMs: at[at.length - 1],
          foreignMaxTokens: w?.foreignMax.tokens,
          certainMax: w?.certainMax.tokens,
          possibleMax: w?.possibleMax.tokens,
          // Admissions in each second of the run.
          perSecond: at.reduce<number[]>((h, t) => {
            const k = Math.floor(t / 1_000);
            while (h.length <= k) h.push(0);
            h[k]!++;
            return h;
          }, []),
        })}\n`,
      );
    }
  }
});
process.exit(0);
