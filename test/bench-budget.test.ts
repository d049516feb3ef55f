import { describe, expect, it } from 'vitest';
import {
  type CallShape,
  idealSchedule,
  uniformMinimumMs,
  utilization,
} from '../scripts/bench/budget.ts';
import { estimateInputTokens } from '../scripts/bench/clients/primitives.ts';
import { SlidingWindow } from '../scripts/bench/clients/sliding-window.ts';
import { costAtMock, mixedCalls, shortCall } from '../scripts/bench/workload.ts';

const same = (n: number, c: Partial<CallShape> = {}): CallShape[] =>
  Array.from({ length: n }, () => ({
    input: 7,
    maxTokens: 200,
    output: 100,
    latencyMs: 250,
    ...c,
  }));

describe("the budget's own minimum", () => {
  it('for identical calls, the ideal client finishes when the closed form says', () => {
    for (const n of [1, 19, 20, 60, 61, 200]) {
      const ideal = idealSchedule(same(n), {
        limit: 4_000,
        windowMs: 10_000,
        concurrency: 10,
        accounting: 'reserve',
      });
      expect(ideal.minimumMs).toBe(
        uniformMinimumMs(n, 207, { limit: 4_000, windowMs: 10_000, concurrency: 10 }, 250),
      );
    }
  });

  it('is 30 s plus one call for the published workload: 60 calls of 207 tokens, 19 to a window', () => {
    expect(costAtMock(shortCall(0))).toBe(207);
    expect(
      uniformMinimumMs(60, 207, { limit: 4_000, windowMs: 10_000, concurrency: 10 }, 250),
    ).toBe(30_250);
  });

  it('never lets a window of the ideal schedule hold more than the limit', () => {
    const calls = mixedCalls(80).map((r, i) => ({
      input: 10,
      maxTokens: r.max_tokens,
      output: 1,
      latencyMs: 100 + (i % 7) * 50,
    }));
    const ideal = idealSchedule(calls, {
      limit: 20_000,
      windowMs: 2_000,
      concurrency: 20,
      accounting: 'reserve',
    });
    const at = ideal.starts;
    for (let i = 0; i < calls.length; i++) {
      let sum = 0;
      for (let j = 0; j < calls.length; j++) {
        if (at[j]! >= at[i]! && at[j]! < at[i]! + 2_000)
          sum += calls[j]!.input + calls[j]!.maxTokens;
      }
      expect(sum).toBeLessThanOrEqual(20_000);
    }
    expect(ideal.utilization).toBeLessThanOrEqual(1);
  });

  it('is shorter when the provider gives unused output back', () => {
    const calls = same(100, { output: 40 });
    const budget = { limit: 4_000, windowMs: 10_000, concurrency: 10 };
    const reserve = idealSchedule(calls, { ...budget, accounting: 'reserve' }).minimumMs;
    const actual = idealSchedule(calls, { ...budget, accounting: 'actual' }).minimumMs;
    expect(actual).toBeLessThan(reserve / 2);
  });

  it('waits for a free slot when every slot is busy', () => {
    const ideal = idealSchedule(same(4, { latencyMs: 1_000 }), {
      limit: 1_000_000,
      windowMs: 10_000,
      concurrency: 2,
      accounting: 'reserve',
    });
    expect(ideal.starts).toEqual([0, 0, 1_000, 1_000]);
    expect(ideal.minimumMs).toBe(2_000);
  });
});

describe('utilization', () => {
  it('averages the full windows and leaves out the drain at the end', () => {
    const admissions = [
      { at: 0, charge: 3_000 },
      { at: 10_000, charge: 4_000 },
      { at: 20_500, charge: 100 },
    ];
    const u = utilization(admissions, 4_000, 10_000);
    expect(u.windows).toEqual([0.75, 1]);
    expect(u.mean).toBeCloseTo(0.875);
  });
});

describe("the article's clients", () => {
  it('estimate input like len(json.dumps(messages)) // 4', () => {
    // json.dumps([{"role": "user", "content": "docaaa"}]) is 39 characters.
    expect(estimateInputTokens(shortCall(0).messages)).toBe(9);
  });

  it('a client sliding window admits up to its limit at once, then waits for the oldest to leave', async () => {
    const w = new SlidingWindow(400, 0.2);
    const t0 = performance.now();
    await w.acquire(200);
    await w.acquire(200);
    expect(performance.now() - t0).toBeLessThan(100);
    await w.acquire(200);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(200);
  });
});
