import { forecastDrain, readBacklog } from '../../shared/forecast.ts';
import type { QueueNames } from '../../shared/keys.ts';
import { Limiter } from '../../shared/limiter/limiter.ts';
import type { RedisClient } from '../../shared/redis.ts';

/** How often the forecast is read again while the run goes on. */
const REFRESH_MS = 2_000;
/** Latencies of this run's calls kept for their median. */
const LATENCIES_KEPT = 101;

/**
 * A batch run's ETA from the queue's forecast (shared/forecast.ts): when the jobs waiting at
 * the run's priority (behind every more urgent one) will have started at the current limits,
 * or, when the calls in flight hold them back more than the limits do, at one call's latency
 * (the median of this run's) per round of calls; then one call more for the last ones.
 * Read again every {@link REFRESH_MS} at most, one read at a time.
 */
export class RunEta {
  private readonly limiter: Limiter;
  private readonly latencies: number[] = [];
  private etaAt: { ms: number; at: number } | undefined;
  private reading: Promise<void> | undefined;
  private lastRead = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly o: {
      readonly redis: RedisClient;
      readonly names: QueueNames;
      readonly priority: number;
      /** The share of each limit the fleet leaves unused. */
      readonly headroom: () => number;
    },
  ) {
    this.limiter = new Limiter({ redis: o.redis, names: o.names });
  }

  /** Notes how long a call of this run took. */
  called(latencyMs: number): void {
    this.latencies.push(latencyMs);
    if (this.latencies.length > LATENCIES_KEPT) this.latencies.shift();
  }

  /** The ETA as last read, less the time since; undefined before the first read. */
  etaMs(now = Date.now()): number | undefined {
    if (now - this.lastRead >= REFRESH_MS) this.refresh(now);
    return this.etaAt && Math.max(0, this.etaAt.ms - (now - this.etaAt.at));
  }

  /** Waits for a read in flight (so that a run ends with none). */
  async settled(): Promise<void> {
    await this.reading;
  }

  private refresh(now: number): void {
    if (this.reading) return;
    this.lastRead = now;
    this.reading = this.read()
      .catch(() => undefined) // An ETA that cannot be read stays as it was.
      .finally(() => {
        this.reading = undefined;
      });
  }

  private async read(): Promise<void> {
    const { redis, names } = this.o;
    const [backlog, snapshot] = await Promise.all([
      readBacklog(redis, names),
      this.limiter.snapshot({ headroom: this.o.headroom() }),
    ]);
    const callMs = this.medianLatencyMs();
    const forecast = forecastDrain(backlog.classes, snapshot, {
      callMs,
      sampled: backlog.sampled,
    });
    const mine = forecast.classes.find((c) => c.priority === this.o.priority);
    const ahead = forecast.classes
      .filter((c) => c.priority <= this.o.priority)
      .reduce((n, c) => n + c.jobs, 0);
    // The calls that go at once: the fleet's cap, or at least as many as are in flight now.
    const slots = Math.max(1, snapshot.concurrency ?? 0, snapshot.inFlight);
    const byCalls = Math.ceil(ahead / slots) * callMs;
    this.etaAt = { ms: Math.max(mine?.drainMs ?? 0, byCalls) + callMs, at: Date.now() };
  }

  private medianLatencyMs(): number {
    if (this.latencies.length === 0) return 0;
    const sorted = [...this.latencies].sort((a, b) => a - b);
    return sorted[Math.floor(sorted.length / 2)]!;
  }
}
