import { describe, expect, it } from 'vitest';
import { runChaos } from '../scripts/bench/chaos/run-chaos.ts';
import { summarizeChaos } from '../scripts/bench/scenarios/chaos.ts';

const LIMIT = 1_500;

describe('chaos: workers, the API, the batch command and Redis killed during a run', () => {
  it('loses no acknowledged job, completes each once within the window, answers 503 while Redis is down and recovers by itself', async () => {
    const lines: string[] = [];
    const r = await runChaos({
      libraryJobs: 240,
      httpJobs: 40,
      documents: 20,
      limitTokens: LIMIT,
      windowMs: 4_000,
      log: (l) => lines.push(l),
      // Returns (and cleans up) before the test's own timeout.
      timeoutMs: 240_000,
    });
    const sum = summarizeChaos(r);
    const p = r.provider;
    process.stderr.write(
      `${lines.join('\n')}\nchaos: ${JSON.stringify({ sum, provider: p, cut: r.cutCalls, outage: r.outage, died: r.unexpectedExits, failures: r.failures })}\n`,
    );
    expect(r.incomplete).toBeUndefined();
    expect(r.unexpectedExits).toEqual([]);

    // Every job someone was told about: 240 by enqueueMany, every HTTP job (and the outage
    // probes the API accepted), every document.
    expect(sum.acknowledged.library).toBe(240);
    expect(sum.acknowledged.http).toBeGreaterThanOrEqual(40);
    expect(sum.acknowledged.batch).toBe(20);
    const notOnce = r.jobs.filter(
      (j) => j.state !== 'completed' || j.completions !== 1 || !j.hasResult,
    );
    expect(notOnce).toEqual([]);
    expect(r.deadLettered).toBe(0);
    // No job appeared that nobody was told about: a request refused while Redis was down added
    // nothing later (each feeder sent its jobs again until acknowledged, under the same key).
    expect(r.completedInQueue).toBe(r.jobs.length);

    // The provider: each call the killed workers had answered was charged, and made again.
    expect(r.cutCalls.inFlight).toBeGreaterThan(0);
    expect(p.repeated).toBeGreaterThanOrEqual(r.cutCalls.answered);
    // The budget binds (several hundred jobs at 1,500 tokens per 4 s) and held, re-runs included.
    expect(p.limitTokens).toBe(LIMIT);
    expect(p.worstWindowTokens).toBeGreaterThan(LIMIT / 2);
    expect(p.worstWindowTokens).toBeLessThanOrEqual(LIMIT);

    // While Redis was down the API said so, with a retry hint, and nothing else; it took jobs
    // again by itself once Redis was back, and the workers went on.
    expect(sum.outage503).toBeGreaterThan(0);
    expect(sum.outageOther).toEqual({});
    expect(r.outage.retryAfter).toMatch(/^\d+$/);
    expect(r.outage.recoverMs).toBeDefined();
    expect(r.outage.firstCompletionMs).toBeDefined();

    // The batch command, killed once and run again: every document has one summary line.
    for (const doc of r.batch.documents) expect(r.batch.perDocument[doc], doc).toBe(1);
    expect(r.batch.errors).toBe(0);
    expect(r.batch.runs).toEqual(['SIGKILL', 0]);
  }, 300_000);
});
