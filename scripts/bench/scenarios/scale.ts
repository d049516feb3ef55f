import { setTimeout as sleep } from 'node:timers/promises';
import { Producer } from '../../../producer/producer.ts';
import { bullPrefix, type QueueNames } from '../../../shared/keys.ts';
import { Limiter } from '../../../shared/limiter/limiter.ts';
import type { Reservation } from '../../../shared/limiter/types.ts';
import { openQueue } from '../../../shared/queues.ts';
import type { RedisClient } from '../../../shared/redis.ts';
import { withMock } from '../mock.ts';
import { startWorkers, type WorkerChild } from '../processes.ts';
import { usedMemory } from '../redis-info.ts';
import { withBenchScope } from '../redis-scope.ts';
import type { ScenarioContext, ScenarioResult, Target } from '../report.ts';
import { count, megabytes, millis, percent, percentile, seconds } from '../table.ts';
import type { WorkerProcessReport } from '../worker-protocol.ts';
import { shortCall, windowMsFor } from '../workload.ts';

const WORKERS = 4;
const CONCURRENCY = 50;
/**
 * The heap cap the README recommends for worker processes. Without it V8 sizes the heap for the
 * whole machine and lets garbage pile up long before it collects; the live set is far smaller.
 */
export const WORKER_HEAP_OPTION = '--max-old-space-size=128 --max-semi-space-size=4';
const LEVELS = [10, 1_000, 10_000] as const;

/** The limiter's key that ends with `suffix` (`:log`, `:stats`...). */
const limiterKey = (limiter: Limiter, suffix: string) =>
  limiter.allKeys.find((k) => k.endsWith(suffix))!;

/** Entries and bytes (MEMORY USAGE) of the limiter's keys of a queue. */
async function limiterFootprint(
  redis: RedisClient,
  limiter: Limiter,
): Promise<{ entries: number; bytes: number }> {
  const keys = limiter.allKeys;
  const [log, res] = await Promise.all([
    redis.zcard(limiterKey(limiter, ':log')),
    redis.hlen(limiterKey(limiter, ':res')),
  ]);
  const sizes = await Promise.all(
    keys.map((k) => redis.call('MEMORY', 'USAGE', k, 'SAMPLES', '0') as Promise<number | null>),
  );
  return { entries: Math.max(log, res), bytes: sizes.reduce<number>((a, b) => a + (b ?? 0), 0) };
}

interface AcquireLatency {
  readonly reservations: number;
  readonly admittedP50: number;
  readonly admittedP99: number;
  readonly deniedP50: number;
  readonly deniedP99: number;
  /** Admitted into a pool's deployment with as many of its calls in flight, none answered. */
  readonly awaitingP50: number;
  readonly awaitingP99: number;
}

/**
 * tryAcquire's latency with 10, 1,000 and 10,000 reservations in the window (a one-hour window,
 * filled with settled reservations): admitted (the common case), and denied in the worst case, a
 * request so large that it needs the whole window to clear, so the script walks the log.
 */
async function acquireLatency(
  redis: RedisClient,
  names: QueueNames,
  samples: number,
): Promise<AcquireLatency[]> {
  const cost = { requests: 1, inputTokens: 10, outputTokens: 10 };
  const roomy = new Limiter({
    redis,
    names,
    windowMs: 3_600_000,
    limits: { tokens: 1_000_000_000 },
    headroom: 0,
  });
  // Same keys, a limit only one call fits: every attempt is denied and must find when the whole
  // window's worth has left.
  const full = new Limiter({
    redis,
    names,
    windowMs: 3_600_000,
    limits: { tokens: cost.inputTokens + cost.outputTokens },
    headroom: 0,
  });
  // A pool's deployment (a share of the slots) with calls in flight awaiting their first answer,
  // under a queue of its own: its admission counts them.
  const deployment = { scopes: ['deployment:bench'] };
  const pool = new Limiter({
    redis,
    names: { ...names, queue: `${names.queue}-pool` },
    scopeSlots: { 'deployment:bench': 1_000_000 },
    leaseMs: 3_600_000,
  });
  const out: AcquireLatency[] = [];
  let filled = 0;
  let awaiting = 0;
  for (const level of LEVELS) {
    while (filled < level) {
      const batch = Math.min(500, level - filled);
      await Promise.all(
        Array.from({ length: batch }, async () => {
          const d = await roomy.tryAcquire(cost);
          if (d.ok)
            await roomy
              .call(d.reservation)
              .succeeded({ inputTokens: cost.inputTokens, outputTokens: cost.outputTokens });
        }),
      );
      filled += batch;
    }
    for (; awaiting < level; awaiting++) await pool.tryAcquire(cost, deployment);
    const admitted: number[] = [];
    const denied: number[] = [];
    const pooled: number[] = [];
    for (let i = 0; i < samples; i++) {
      const t0 = performance.now();
      const d = await roomy.tryAcquire(cost);
      admitted.push(performance.now() - t0);
      if (d.ok) await roomy.release(d.reservation as Reservation);
      const t1 = performance.now();
      await full.tryAcquire(cost);
      denied.push(performance.now() - t1);
      const t2 = performance.now();
      const p = await pool.tryAcquire(cost, deployment);
      pooled.push(performance.now() - t2);
      if (p.ok) await pool.release(p.reservation);
    }
    out.push({
      reservations: level,
      admittedP50: percentile(admitted, 50),
      admittedP99: percentile(admitted, 99),
      deniedP50: percentile(denied, 50),
      deniedP99: percentile(denied, 99),
      awaitingP50: percentile(pooled, 50),
      awaitingP99: percentile(pooled, 99),
    });
  }
  return out;
}

/**
 * Many jobs: enqueue with `enqueueMany`, drain with four worker processes at concurrency 50 under
 * a generous budget, and what it costs: Redis memory per queued job, the limiter's latency as its
 * window fills, worker memory, and the limiter's memory staying within one window.
 */
export async function scaleScenario(ctx: ScenarioContext): Promise<ScenarioResult> {
  const jobs = ctx.quick ? 1_000 : 100_000;
  const windowMs = windowMsFor(ctx.quick);
  const figures: Record<string, unknown> = {
    jobs,
    windowMs,
    workers: WORKERS,
    concurrency: CONCURRENCY,
  };
  const limiterSettings = {
    windowMs,
    limits: { requests: 100_000_000, tokens: 1_000_000_000_000 },
  };
  const maxInFlight = WORKERS * CONCURRENCY;

  await withMock({ latencyMs: 0, latencyPerOutputTokenMs: 0, outputShare: 0.5 }, (mock) =>
    withBenchScope(ctx.redisUrl, 'scale', async (redis, names) => {
      ctx.log(`scale: enqueueing ${count(jobs)} jobs`);
      const producer = new Producer({ redis, names, limits: limiterSettings.limits });
      const requests = Array.from({ length: jobs }, (_, i) => shortCall(i, 8));
      const mem0 = await usedMemory(redis);
      const t0 = performance.now();
      try {
        for (let i = 0; i < jobs; i += 10_000)
          await producer.enqueueMany(requests.slice(i, i + 10_000), { chunkSize: 1_000 });
      } finally {
        await producer.close();
      }
      const enqueueMs = performance.now() - t0;
      const mem1 = await usedMemory(redis);
      // The same, key by key: a sample of job hashes plus the queue's shared structures.
      const base = `${bullPrefix(names)}:${names.queue}`;
      const sample = await redis.zrange(`${base}:prioritized`, '0', '99');
      const jobBytes = await Promise.all(
        sample.map(
          (id) => redis.call('MEMORY', 'USAGE', `${base}:${id}`, 'SAMPLES', '0') as Promise<number>,
        ),
      );
      const shared = await Promise.all(
        ['prioritized', 'events', 'id', 'pc', 'meta'].map(
          (k) =>
            redis.call('MEMORY', 'USAGE', `${base}:${k}`, 'SAMPLES', '0') as Promise<number | null>,
        ),
      );
      figures['enqueueMs'] = enqueueMs;
      figures['enqueuePerSecond'] = jobs / (enqueueMs / 1000);
      figures['redisBytesPerJob'] = (mem1 - mem0) / jobs;
      figures['sampledBytesPerJob'] =
        jobBytes.reduce((a, b) => a + b, 0) / Math.max(1, jobBytes.length) +
        shared.reduce<number>((a, b) => a + (b ?? 0), 0) / jobs;

      ctx.log(`scale: draining with ${WORKERS} worker processes × ${CONCURRENCY}`);
      const limiter = new Limiter({ redis, names, ...limiterSettings });
      let children: WorkerChild[] = [];
      let reports: WorkerProcessReport[] = [];
      // The window holds what was admitted in its last windowMs (a little more: what left it
      // waits for the next acquire or prune to drop it) and what is in flight: at each sample, the limiter's own count of admissions in that span (read after the
      // footprint) plus the slots held (read before it) bound it. Reservations made for a gate
      // round whose jobs are not active yet count: they are the window's too.
      const during = { entries: 0, bytes: 0, bound: 0, worstShare: 0 };
      const admissions: { at: number; admitted: number }[] = [];
      const span = windowMs + 600;
      const admittedSoFar = async () =>
        Number((await redis.hget(limiterKey(limiter, ':stats'), 'admitted')) ?? 0);
      try {
        // Half the workers run with Node's defaults, half with the recommended heap cap.
        children = await startWorkers(WORKERS, (i) => ({
          nodeOptions: i % 2 === 1 ? WORKER_HEAP_OPTION.split(' ') : [],
          mode: 'llmq',
          redisUrl: ctx.redisUrl,
          names,
          mockUrl: mock.url,
          concurrency: CONCURRENCY,
          limiter: limiterSettings,
          maxInFlight,
          record: 'counts',
        }));
        const queue = openQueue(redis, names);
        queue.on('error', () => {});
        const t1 = performance.now();
        admissions.push({ at: t1, admitted: await admittedSoFar() });
        for (const c of children) c.go();
        let lastSample = 0;
        let failed = 0;
        try {
          for (;;) {
            const c = await queue.getJobCounts('completed', 'failed');
            failed = c['failed'] ?? 0;
            const done = (c['completed'] ?? 0) + failed;
            const now = performance.now();
            if (now - lastSample > 500) {
              lastSample = now;
              const slots = await redis.zcard(limiterKey(limiter, ':slots'));
              const f = await limiterFootprint(redis, limiter);
              const admitted = await admittedSoFar();
              admissions.push({ at: now, admitted });
              // The last count taken before the span began: every admission since counts.
              const before = admissions.findLast((h) => h.at <= now - span) ?? admissions[0]!;
              const bound = admitted - before.admitted + slots;
              const share = f.entries / Math.max(1, bound);
              if (share > during.worstShare) Object.assign(during, { worstShare: share, bound });
              during.entries = Math.max(during.entries, f.entries);
              during.bytes = Math.max(during.bytes, f.bytes);
            }
            if (done >= jobs) break;
            if (now - t1 > 1_800_000)
              throw new Error(`scale: only ${done} of ${jobs} jobs drained in 30 minutes`);
            await sleep(100);
          }
        } finally {
          await queue.close();
        }
        const drainMs = performance.now() - t1;
        figures['drainMs'] = drainMs;
        figures['drainPerSecond'] = jobs / (drainMs / 1000);
        figures['failed'] = failed;
        reports = await Promise.all(children.map((c) => c.stop()));
        children = [];
      } finally {
        for (const c of children) c.kill();
      }
      figures['workerCompiled'] = reports.every((r) => r.compiled);
      figures['workerPeakRssBytes'] = reports.map((r) => r.peakRssBytes);
      figures['workerIdleRssBytes'] = reports.map((r) => r.idleRssBytes);
      figures['workerPeakHeapBytes'] = reports.map((r) => r.peakHeapBytes);
      figures['workerIdleHeapBytes'] = reports.map((r) => r.idleHeapBytes);
      figures['http429'] = reports.reduce((a, r) => a + (r.calls.statuses['429'] ?? 0), 0);
      figures['limiterDuring'] = during;
      // One window (and what is kept for late readings) after the last call, a prune (an idle
      // worker's) drops what left.
      await sleep(windowMs + 200);
      await limiter.prune();
      figures['limiterAfter'] = await limiterFootprint(redis, limiter);
    }),
  );

  ctx.log('scale: acquire latency as the window fills');
  const samples = ctx.quick ? 50 : 500;
  figures['acquire'] = await withBenchScope(ctx.redisUrl, 'scale-acquire', (redis, names) =>
    acquireLatency(redis, names, samples),
  );

  const f = figures as {
    enqueuePerSecond: number;
    drainPerSecond: number;
    drainMs: number;
    redisBytesPerJob: number;
    sampledBytesPerJob: number;
    workerCompiled: boolean;
    workerPeakRssBytes: number[];
    workerIdleRssBytes: number[];
    workerPeakHeapBytes: number[];
    workerIdleHeapBytes: number[];
    limiterDuring: { entries: number; bytes: number; bound: number; worstShare: number };
    limiterAfter: { entries: number; bytes: number };
    acquire: AcquireLatency[];
    http429: number;
    failed: number;
  };
  // Workers 1 and 3 ran with the heap cap, 0 and 2 with Node's defaults.
  const pick = (xs: number[], capped: boolean) => xs.filter((_, i) => i % 2 === (capped ? 1 : 0));
  const peakCapped = Math.max(...pick(f.workerPeakRssBytes, true));
  const peakDefault = Math.max(...pick(f.workerPeakRssBytes, false));
  const runtime = f.workerCompiled ? 'compiled JavaScript (dist/)' : 'TypeScript through tsx';
  const rssRow = (capped: boolean) => [
    `worker peak RSS at concurrency ${CONCURRENCY}, ${capped ? WORKER_HEAP_OPTION : "Node's default heap"}`,
    megabytes(capped ? peakCapped : peakDefault),
    `each ${pick(f.workerPeakRssBytes, capped).map(megabytes).join(', ')}; idle before work ${megabytes(Math.max(...pick(f.workerIdleRssBytes, capped)))}; heap idle ${megabytes(Math.max(...pick(f.workerIdleHeapBytes, capped)))}, peak ${megabytes(Math.max(...pick(f.workerPeakHeapBytes, capped)))}`,
  ];
  const rows: string[][] = [
    ['enqueue rate (enqueueMany, chunks of 1,000)', `${count(f.enqueuePerSecond)} jobs/s`, ''],
    [
      `drain rate (${WORKERS} workers × ${CONCURRENCY}, generous budget)`,
      `${count(f.drainPerSecond)} jobs/s`,
      `${seconds(f.drainMs, 1)} for ${count(jobs)}`,
    ],
    [
      'Redis memory per queued job (INFO used_memory delta)',
      `${count(f.redisBytesPerJob)} B`,
      `sampled MEMORY USAGE: ${count(f.sampledBytesPerJob)} B`,
    ],
    ...f.acquire.map((a) => [
      `tryAcquire with ${count(a.reservations)} reservations in the window`,
      `p50 ${millis(a.admittedP50)}, p99 ${millis(a.admittedP99)}`,
      `denied, whole-window scan: p50 ${millis(a.deniedP50)}, p99 ${millis(a.deniedP99)}`,
    ]),
    ...f.acquire.map((a) => [
      `tryAcquire into a pool's deployment, ${count(a.reservations)} of its calls awaiting an answer`,
      `p50 ${millis(a.awaitingP50)}, p99 ${millis(a.awaitingP99)}`,
      '',
    ]),
    rssRow(false),
    rssRow(true),
    [
      'limiter keys during the drain (peak)',
      `${count(f.limiterDuring.entries)} reservations, ${megabytes(f.limiterDuring.bytes)}`,
      `at most ${percent(f.limiterDuring.worstShare, 0)} of one window's admissions + calls in flight (${count(f.limiterDuring.bound)} then)`,
    ],
    [
      'limiter keys one window after the drain',
      `${count(f.limiterAfter.entries)} reservations, ${megabytes(f.limiterAfter.bytes)}`,
      '',
    ],
  ];
  const targets: Target[] = [
    {
      name: 'worker RSS at concurrency 50 under 150 MB',
      met: peakCapped < 150 * 1024 * 1024,
      detail: `${megabytes(peakCapped)} with ${WORKER_HEAP_OPTION}, as the README recommends (${megabytes(peakDefault)} with Node's default heap); llmq ran as ${runtime}`,
    },
    {
      name: "the limiter's Redis memory is bounded by one window's reservations",
      met: f.limiterDuring.worstShare <= 1.1 && f.limiterAfter.entries === 0,
      detail: `peak ${count(f.limiterDuring.entries)} reservations, at most ${percent(f.limiterDuring.worstShare, 0)} of the window's admissions + calls in flight; ${count(f.limiterAfter.entries)} one window after the drain`,
    },
    {
      name: 'every job drained without a 429',
      met: f.http429 === 0 && f.failed === 0,
      detail: `${f.http429} 429s, ${f.failed} failed`,
    },
  ];
  return {
    name: 'scale',
    title: `${count(jobs)} small jobs, ${WORKERS} worker processes × ${CONCURRENCY}, ${windowMs / 1000} s window`,
    settings: {
      jobs,
      windowMs,
      workers: WORKERS,
      concurrency: CONCURRENCY,
      limiter: { ...limiterSettings, concurrency: maxInFlight },
    },
    headers: ['measure', 'value', 'detail'],
    rows,
    figures: [figures],
    targets,
    notes: [
      'Redis is shared: the INFO delta includes whatever else wrote meanwhile; the sampled figure is this queue’s keys alone',
      `worker processes ran llmq as ${runtime}; two of the four with ${WORKER_HEAP_OPTION}; RSS and heap sampled every 100 ms`,
      `tryAcquire latency: ${samples} sequential attempts from this process per level, each admitted one released again`,
    ],
  };
}
