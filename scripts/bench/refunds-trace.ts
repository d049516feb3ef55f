/**
 * Where llmq loses time against the ideal client in the refunds scenario (150 calls of 207
 * tokens answering 40, 4,000 per sliding 10 s, unused output given back, 10 at once): one llmq
 * run, call by call. For each call (in the order they reached the provider) it prints when it
 * was sent and ended, when the ideal client started the same call, and how late llmq sent it
 * against the earliest moment that llmq's own history allowed (the call before it sent, a free
 * slot, room in the provider's window with every earlier call charged as the provider charged
 * it): the local loss, so the calls where time goes stand out.
 *
 *   LLMQ_FROM_SOURCE=1 node --import tsx scripts/bench/refunds-trace.ts [runs] [--calls] [--headroom SHARE]
 *     [--differing]   (the mock counting input as `llmq bench --counter differing` does)
 */
import { resolveConfig } from '../../shared/config.ts';
import { idealSchedule } from './budget.ts';
import { runLlmq, tokenBudget } from './llmq-runner.ts';
import { withMock } from './mock.ts';
import type { AdmittedCall } from './recorder.ts';
import { DIFFERING_COUNTER, latencyFor, shapesOf, shortCall } from './workload.ts';

const runs = Number(process.argv[2] ?? 1);
const printCalls = process.argv.includes('--calls');
const at = process.argv.indexOf('--headroom');
/** The limiter's headroom (its default when not given). */
const headroom = at > 0 ? Number(process.argv[at + 1]) : undefined;
const counting = process.argv.includes('--differing') ? DIFFERING_COUNTER : undefined;
const LIMIT = 4_000;
const W = 10_000;
const C = 10;
const { redisUrl } = resolveConfig({ flags: {}, env: process.env });
const latency = latencyFor(false);
const requests = Array.from({ length: 150 }, (_, i) => shortCall(i));
const shapes = shapesOf(requests, 0.2, latency, counting);
const budget = {
  limits: { tokens: LIMIT },
  windowMs: W,
  concurrency: C,
  accounting: 'actual',
} as const;
const ideal = idealSchedule(shapes, budget);

/**
 * The earliest llmq could have sent call i, given when it really sent and ended the calls
 * before it: FCFS after call i − 1, a free slot, room in the provider's window.
 */
function earliest(calls: readonly AdmittedCall[], t0: number, i: number): number {
  const at = (j: number) => calls[j]!.at - t0;
  const end = (j: number) => (calls[j]!.endedAt ?? calls[j]!.at) - t0;
  const full = (j: number) => calls[j]!.input + calls[j]!.maxTokens;
  const settled = (j: number) => calls[j]!.input + (calls[j]!.output ?? calls[j]!.maxTokens);
  const fits = (t: number) => {
    let sum = full(i);
    for (let j = 0; j < i; j++) {
      if (at(j) <= t - W) continue;
      sum += t < end(j) ? full(j) : settled(j);
    }
    return sum <= LIMIT;
  };
  let t = i === 0 ? 0 : at(i - 1);
  const running = calls
    .slice(0, i)
    .map((_, j) => end(j))
    .filter((e) => e > t)
    .sort((a, b) => a - b);
  if (running.length >= C) t = Math.max(t, running[running.length - C]!);
  const candidates = [t];
  for (let j = 0; j < i; j++) {
    if (at(j) + W > t) candidates.push(at(j) + W);
    if (end(j) > t) candidates.push(end(j));
  }
  candidates.sort((a, b) => a - b);
  return candidates.find(fits) ?? Number.NaN;
}

await withMock(
  {
    ...counting,
    windowMs: W,
    limits: { tokens: LIMIT },
    algorithm: 'sliding',
    outputAccounting: 'actual',
    latencyMs: latency.baseMs,
    latencyPerOutputTokenMs: latency.perTokenMs,
    outputShare: 0.2,
  },
  async (mock) => {
    for (let k = 0; k < runs; k++) {
      await mock.reset();
      const run = await runLlmq({
        redisUrl,
        scope: 'refunds-trace',
        mockUrl: mock.url,
        requests,
        limiter: { ...tokenBudget(W, LIMIT, C, 'actual').limiter, headroom },
        maxInFlight: C,
        workers: { count: 1, where: 'in-process' },
        concurrency: C,
        recordOutput: true,
        watchLimiter: true,
        counting,
      });
      const calls = [...run.calls.admitted].sort((a, b) => a.at - b.at);
      const t0 = calls[0]!.at;
      let lossSum = 0;
      const losses: { i: number; loss: number; at: number }[] = [];
      const lines: string[] = [];
      calls.forEach((c, i) => {
        const e = earliest(calls, t0, i);
        const loss = c.at - t0 - e;
        lossSum += loss;
        losses.push({ i, loss, at: c.at - t0 });
        if (printCalls)
          lines.push(
            [
              i,
              c.at - t0,
              (c.endedAt ?? Number.NaN) - t0,
              Math.round(ideal.starts[i]!),
              Math.round(e),
              Math.round(loss),
            ].join('\t'),
          );
      });
      if (printCalls) {
        process.stdout.write('i\tsent\tended\tideal\tearliest\tloss\n');
        process.stdout.write(`${lines.join('\n')}\n`);
      }
      const lastEnd = Math.max(...calls.map((c) => (c.endedAt ?? c.at) - t0));
      const big = losses
        .filter((l) => l.loss > 30)
        .map((l) => `#${l.i}@${l.at}:+${Math.round(l.loss)}`);
      process.stdout.write(
        `${JSON.stringify({
          run: k,
          headroom: headroom ?? 'default',
          wallMs: run.wallMs,
          idealMs: Math.round(ideal.minimumMs),
          ratio: Number((run.wallMs / ideal.minimumMs).toFixed(3)),
          lastEndFromFirstSend: lastEnd,
          rateLimited: run.calls.statuses['429'] ?? 0,
          localLossMs: Math.round(lossSum),
          perWindow: [0, 1, 2].map(
            (k) => calls.filter((c) => c.at - t0 >= k * W && c.at - t0 < (k + 1) * W).length,
          ),
          idealPerWindow: [0, 1, 2].map(
            (k) => ideal.starts.filter((s) => s >= k * W && s < (k + 1) * W).length,
          ),
          foreignMax: run.limiterWatch?.foreignMax.tokens,
          accuracy: run.limiterWatch?.accuracy,
          callsLate: big,
        })}\n`,
      );
    }
  },
);
process.exit(0);
