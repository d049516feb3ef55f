import { describe, expect, it } from 'vitest';
import {
  type CallShape,
  fluidMinimumMs,
  idealSchedule,
  meanWindowSum,
  uniformMinimumMs,
  utilization,
} from '../scripts/bench/budget.ts';
import { estimateInputTokens } from '../scripts/bench/clients/primitives.ts';
import { SlidingWindow } from '../scripts/bench/clients/sliding-window.ts';
import { costAtMock, mixedCalls, shortCall } from '../scripts/bench/workload.ts';
import { nextTurn } from './helpers.ts';

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
        limits: { tokens: 4_000 },
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
      limits: { tokens: 20_000 },
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
    const budget = { limits: { tokens: 4_000 }, windowMs: 10_000, concurrency: 10 };
    const reserve = idealSchedule(calls, { ...budget, accounting: 'reserve' }).minimumMs;
    const actual = idealSchedule(calls, { ...budget, accounting: 'actual' }).minimumMs;
    expect(actual).toBeLessThan(reserve / 2);
  });

  it('waits for a free slot when every slot is busy', () => {
    const ideal = idealSchedule(same(4, { latencyMs: 1_000 }), {
      limits: { tokens: 1_000_000 },
      windowMs: 10_000,
      concurrency: 2,
      accounting: 'reserve',
    });
    expect(ideal.starts).toEqual([0, 0, 1_000, 1_000]);
    expect(ideal.minimumMs).toBe(2_000);
  });
});

describe('the ideal client under split limits', () => {
  const call = (input: number, maxTokens: number, output: number, latencyMs: number) => ({
    input,
    maxTokens,
    output,
    latencyMs,
  });
  const budget = (limits: object, accounting: 'reserve' | 'actual' = 'reserve') => ({
    limits,
    windowMs: 1_000,
    concurrency: 10,
    accounting,
  });

  it('waits for the input limit even when total tokens would fit', () => {
    const calls = [call(60, 40, 40, 100), call(60, 10, 10, 100)];
    expect(idealSchedule(calls, budget({ tokens: 200 })).starts).toEqual([0, 0]);
    const split = idealSchedule(calls, budget({ input: 100, output: 100 }));
    expect(split.starts).toEqual([0, 1_000]);
    expect(split.minimumMs).toBe(1_100);
  });

  it('starts a call when an earlier one gives unused output back, under actual accounting', () => {
    const calls = [call(1, 100, 20, 500), call(1, 80, 80, 100)];
    expect(idealSchedule(calls, budget({ output: 100 })).starts).toEqual([0, 1_000]);
    const actual = idealSchedule(calls, budget({ output: 100 }, 'actual'));
    expect(actual.starts).toEqual([0, 500]);
    expect(actual.minimumMs).toBe(600);
  });

  it('counts requests against the requests limit', () => {
    const calls = [call(1, 1, 1, 10), call(1, 1, 1, 10), call(1, 1, 1, 10)];
    expect(idealSchedule(calls, budget({ requests: 2 })).starts).toEqual([0, 0, 1_000]);
  });

  it('refuses a call larger than a limit, naming the dimension', () => {
    expect(() => idealSchedule([call(150, 1, 1, 10)], budget({ input: 100 }))).toThrow(
      'call 0 costs 150 (input), above the limit 100',
    );
  });
});

describe('the ideal client when output is charged as it is produced', () => {
  // Five calls of 30 input tokens, max_tokens 50, answering 20, each 100 ms, 100 tokens per 1 s.
  const calls = Array.from({ length: 5 }, () => ({
    input: 30,
    maxTokens: 50,
    output: 20,
    latencyMs: 100,
  }));
  const budget = (shape: 'sliding' | 'bucket', accounting: 'reserve' | 'produced') => ({
    limits: { tokens: 100 },
    windowMs: 1_000,
    concurrency: 10,
    accounting,
    shape,
  });

  it('on a window, starts calls on their input alone; their output, charged at the end, delays the next', () => {
    const reserve = idealSchedule(calls, budget('sliding', 'reserve'));
    expect(reserve.starts).toEqual([0, 1_000, 2_000, 3_000, 4_000]);
    const produced = idealSchedule(calls, budget('sliding', 'produced'));
    // Three fit at once (30 each, and one output token more); the fourth once their input has
    // left (their 60 output tokens, charged at 100 ms, stay till 1,100 ms); the fifth then.
    expect(produced.starts).toEqual([0, 0, 0, 1_000, 1_100]);
    expect(produced.minimumMs).toBe(1_200);
  });

  it('on a bucket, takes the output from the level when each call ends, below empty if need be', () => {
    const produced = idealSchedule(calls, budget('bucket', 'produced'));
    // 100 − 3 × 30 = 10 left; at 100 ms +10 refilled, −60 produced: −40, so 31 is there at
    // 810 ms; the fourth's output (−20 at 910 ms) puts the fifth at 1,310 ms.
    expect(produced.starts).toEqual([0, 0, 0, 810, 1_310]);
    expect(produced.minimumMs).toBe(1_410);
  });

  it('refuses a call while the output budget is spent, though its output is not charged yet', () => {
    const full = Array.from({ length: 4 }, () => ({
      input: 1,
      maxTokens: 50,
      output: 50,
      latencyMs: 100,
    }));
    const ideal = idealSchedule(full, {
      limits: { output: 50 },
      windowMs: 1_000,
      concurrency: 2,
      accounting: 'produced',
    });
    // The first two spend 100 output tokens at 100 ms: the third waits for them to leave.
    expect(ideal.starts).toEqual([0, 0, 1_100, 1_100]);
  });
});

describe('the fluid minimum', () => {
  it('is a window of work at once, the rest at the limit per window, plus the shortest call', () => {
    const calls = same(3, { input: 50, maxTokens: 50, output: 50, latencyMs: 100 });
    const b = {
      limits: { tokens: 100 },
      windowMs: 1_000,
      concurrency: 10,
      accounting: 'reserve',
    } as const;
    expect(fluidMinimumMs(calls, b)).toBe(2_100);
    expect(idealSchedule(calls, b).minimumMs).toBe(2_100);
  });

  it('takes the dimension that needs longest, and never exceeds the ideal client', () => {
    const calls = mixedCalls(60).map((r, i) => ({
      input: 20 + (i % 13) * 40,
      maxTokens: r.max_tokens % 1_500,
      output: Math.round((r.max_tokens % 1_500) / 2),
      latencyMs: 100 + (i % 5) * 100,
    }));
    for (const accounting of ['reserve', 'actual'] as const) {
      const b = {
        limits: { input: 6_000, output: 8_000, requests: 30 },
        windowMs: 1_000,
        concurrency: 10,
        accounting,
      };
      const fluid = fluidMinimumMs(calls, b);
      const input = calls.reduce((s, c) => s + c.input, 0);
      expect(fluid).toBeGreaterThanOrEqual((input / 6_000 - 1) * 1_000 + 100);
      expect(fluid).toBeLessThanOrEqual(idealSchedule(calls, b).minimumMs);
    }
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

  it('averages the window sum over time: bursts a window apart read as full, wherever they fall', () => {
    // A full limit admitted every 10 s, the bursts at 5 s past each window edge.
    const bursts = [5_000, 15_000, 25_000, 35_000].map((at) => ({ at, charge: 4_000 }));
    const span = { from: 0, to: 40_000 };
    expect(meanWindowSum(bursts, span, 10_000, 100) / 4_000).toBeCloseTo(1, 2);
    // Half as much, and nothing in a span shorter than a window.
    const half = bursts.map((b) => ({ ...b, charge: 2_000 }));
    expect(meanWindowSum(half, span, 10_000, 100) / 4_000).toBeCloseTo(0.5, 2);
    expect(meanWindowSum(bursts, { from: 0, to: 9_000 }, 10_000)).toBeNaN();
  });
});

describe("the article's clients", () => {
  it('estimate input like len(json.dumps(messages)) // 4', () => {
    // json.dumps([{"role": "user", "content": "docaaa"}]) is 39 characters.
    expect(estimateInputTokens(shortCall(0).messages)).toBe(9);
  });

  it('a client sliding window admits up to its limit at once, then waits for the oldest to leave', async () => {
    const w = new SlidingWindow(400, 1);
    const settled: boolean[] = [false, false, false];
    const acquired = [0, 1, 2].map((i) => w.acquire(200).then(() => (settled[i] = true)));
    // The first two need no timer; the third sleeps until the first leaves the window.
    await nextTurn();
    expect(settled).toEqual([true, true, false]);
    await Promise.all(acquired);
    expect(settled).toEqual([true, true, true]);
  });
});
