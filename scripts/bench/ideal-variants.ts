/**
 * What each of llmq's rules costs against the ideal client (budget.ts), for the refunds and
 * split workloads: the ideal first-come-first-served client with one rule of llmq's added at a
 * time, then all of them. The rules: headroom (a share of each limit left unused), the window
 * margin, output counted from the call's end (`actual` accounting), input counted from the end
 * too (as before input was stamped when the response began), a fixed delay between the moment
 * room comes back and the call's start, and input reserved above the provider's count while a
 * call runs (the learned estimate's margin). Split's output is taken at its mean share.
 *
 *   node --import tsx scripts/bench/ideal-variants.ts
 */
import { type CallShape, idealSchedule } from './budget.ts';
import { DIFFERING_COUNTER, latencyFor, shapesOf, shortCall, splitCalls } from './workload.ts';

interface Rules {
  readonly headroom?: number;
  readonly marginMs?: number;
  readonly inputAtEnd?: boolean;
  readonly outputAtEnd?: boolean;
  readonly delayMs?: number;
  /** Input reserved while a call runs, over the provider's count. */
  readonly inputOver?: number;
}

/** Limits by dimension: requests, input, output, tokens (0: none). */
type Limits = readonly [number, number, number, number];

/** When the last call ends, for a client that follows the ideal client's order under `rules`. */
function wallUnder(
  calls: readonly CallShape[],
  limits: Limits,
  W: number,
  C: number,
  rules: Rules,
): number {
  const L = limits.map((l) => (l > 0 ? Math.floor(l * (1 - (rules.headroom ?? 0))) : 0));
  const m = rules.marginMs ?? 0;
  const delay = rules.delayMs ?? 0;
  const over = rules.inputOver ?? 1;
  const starts: number[] = [];
  const ends: number[] = [];
  const reservedIn = (c: CallShape) => Math.ceil(c.input * over);
  const held = (j: number, t: number): number[] => {
    const c = calls[j]!;
    const [s, e] = [starts[j]!, ends[j]!];
    const r = [0, 0, 0, 0];
    if (t < e || (rules.inputAtEnd ? e : s) + W + m > t) {
      const inp = t < e ? reservedIn(c) : c.input;
      r[0]! += 1;
      r[1]! += inp;
      r[3]! += inp;
    }
    const out = t < e ? c.maxTokens : (rules.outputAtEnd ? e : s) + W + m > t ? c.output : 0;
    r[2]! += out;
    r[3]! += out;
    return r;
  };
  const fits = (i: number, t: number) => {
    const c = calls[i]!;
    const sum = [1, reservedIn(c), c.maxTokens, reservedIn(c) + c.maxTokens];
    for (let j = 0; j < i; j++) {
      const h = held(j, t);
      for (let d = 0; d < 4; d++) sum[d]! += h[d]!;
    }
    return L.every((l, d) => l === 0 || sum[d]! <= l);
  };
  for (let i = 0; i < calls.length; i++) {
    let t = i === 0 ? 0 : starts[i - 1]!;
    const running = ends.filter((e) => e > t).sort((a, b) => a - b);
    if (running.length >= C) t = Math.max(t, running[running.length - C]! + delay);
    const candidates = [t];
    for (let j = 0; j < i; j++)
      for (const x of [starts[j]! + W + m, ends[j]! + W + m, ends[j]!])
        if (x + delay > t) candidates.push(x + delay);
    candidates.sort((a, b) => a - b);
    const start = candidates.find((at) => fits(i, at)) ?? Number.NaN;
    starts.push(start);
    ends.push(start + calls[i]!.latencyMs);
  }
  return Math.max(...ends);
}

const RULES: Record<string, Rules> = {
  'headroom 1%': { headroom: 0.01 },
  'margin 50 ms': { marginMs: 50 },
  'output from the end': { outputAtEnd: true },
  'input and output from the end': { inputAtEnd: true, outputAtEnd: true },
  'input reserved 8% over': { inputOver: 1.08 },
  'start 10 ms after room': { delayMs: 10 },
  'all, input from the end (before)': {
    headroom: 0.01,
    marginMs: 50,
    inputAtEnd: true,
    outputAtEnd: true,
    delayMs: 10,
    inputOver: 1.08,
  },
  'all, input from the start (now)': {
    headroom: 0.01,
    marginMs: 50,
    outputAtEnd: true,
    delayMs: 10,
    inputOver: 1.08,
  },
};

const latency = latencyFor(false);
const workloads = [
  {
    name: 'refunds',
    calls: shapesOf(
      Array.from({ length: 150 }, (_, i) => shortCall(i)),
      0.2,
      latency,
    ),
    limits: [0, 0, 0, 4_000] as Limits,
    concurrency: 10,
  },
  {
    name: 'split',
    calls: shapesOf(splitCalls(120), 0.625, latency, DIFFERING_COUNTER),
    limits: [120, 12_000, 8_000, 0] as Limits,
    concurrency: 20,
  },
];
for (const w of workloads) {
  const [req, input, output, tokens] = w.limits;
  const ideal = idealSchedule(w.calls, {
    limits: {
      requests: req || undefined,
      input: input || undefined,
      output: output || undefined,
      tokens: tokens || undefined,
    },
    windowMs: 10_000,
    concurrency: w.concurrency,
    accounting: 'actual',
  }).minimumMs;
  process.stdout.write(`${w.name}: ideal ${(ideal / 1000).toFixed(2)} s\n`);
  for (const [name, rules] of Object.entries(RULES)) {
    const wall = wallUnder(w.calls, w.limits, 10_000, w.concurrency, rules);
    process.stdout.write(
      `  ${name.padEnd(34)} ${(wall / 1000).toFixed(2)} s  ${(wall / ideal).toFixed(3)}×\n`,
    );
  }
}
