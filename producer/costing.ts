import { type LimitSet, readFleetLimits } from '../shared/fleet-limits.ts';
import type { QueueNames } from '../shared/keys.ts';
import { readProviderLimits } from '../shared/limiter/provider-limits.ts';
import type { PageCosts } from '../shared/page-costs.ts';
import type { RedisClient } from '../shared/redis.ts';
import type { JobBuilder } from './job-builder.ts';

/**
 * What a job is checked and reserved against, read from Redis before it is built: the fleet's
 * stored limits, the provider's limits as read for its model (where readings land), and what
 * its PDF pages cost as learned. Each is read again once it is `maxAgeMs` old; a model scope
 * with no reading yet, every time (its first one is what a run with no limit waits for).
 */
export class Costing {
  readonly redis: RedisClient;
  readonly names: QueueNames;
  /** Checks and costs a job against what was read (JobBuilder). */
  readonly builder: JobBuilder;
  /** What PDF pages cost, as the fleet learned it (the builder's too). */
  readonly pageCosts: PageCosts;
  /** When the fleet's limits were last read (ms), or undefined when they are not read at all. */
  private fleetReadAt: number | undefined;
  /** When the provider's limits of each scope were last read (ms). */
  private readonly readingsAt = new Map<string, number>();

  constructor(
    private readonly o: {
      readonly redis: RedisClient;
      readonly names: QueueNames;
      readonly builder: JobBuilder;
      readonly pageCosts: PageCosts;
      /** Read the fleet's stored limits and the provider's (ProducerOptions.fleetLimits). */
      readonly readFleet: boolean;
      readonly maxAgeMs: number;
      /** Runs a Redis command as the producer does (typed errors, its timeout). */
      readonly call: <T>(op: () => Promise<T>) => Promise<T>;
    },
  ) {
    this.fleetReadAt = o.readFleet ? Number.NEGATIVE_INFINITY : undefined;
    ({
      redis: this.redis,
      names: this.names,
      builder: this.builder,
      pageCosts: this.pageCosts,
    } = o);
  }

  /** The share of each limit the fleet leaves unused, as last read. */
  get headroom(): number {
    return this.builder.limits.headroom;
  }

  /**
   * The most input tokens a request of `model` with `maxTokens` may have to fit every limit it
   * is charged to, the provider's as read included; Infinity when none bounds it.
   */
  async inputRoom(model: string, maxTokens: number, tenant?: string): Promise<number> {
    await this.load([{ model }]);
    return this.builder.inputRoom(model, maxTokens, tenant);
  }

  /** The fleet's stored limits, read again after `maxAgeMs` (or `force`). */
  async limits(force = false): Promise<LimitSet> {
    const { o } = this;
    const at = this.fleetReadAt;
    if (at !== undefined && (force || Date.now() - at >= o.maxAgeMs)) {
      const stored = await o.call(() => readFleetLimits(o.redis, o.names));
      o.builder.useFleet(stored?.limits);
      this.fleetReadAt = Date.now();
    }
    return o.builder.limits;
  }

  /** Everything `requests` are costed against (their models' readings, their PDFs' pages). */
  async load(requests: readonly unknown[]): Promise<void> {
    const models = new Set<string>();
    for (const r of requests) {
      const model = (r as { model?: unknown } | null)?.model;
      if (typeof model === 'string') models.add(model);
    }
    await this.limits();
    await this.readings([...models]);
    // Unread, a page is reserved at the most it costs: the learning is an optimisation.
    const paged = new Set(requests.filter(holdsPdf).map((r) => (r as { model: string }).model));
    await Promise.all([...paged].map((m) => this.o.pageCosts.read(m).catch(() => undefined)));
  }

  /** The provider's limits read for these models' scopes. */
  private async readings(models: readonly string[]): Promise<void> {
    const { o } = this;
    if (this.fleetReadAt === undefined) return;
    const now = Date.now();
    const due = [...new Set(models.flatMap((m) => o.builder.scopesOf(m)))].filter(
      (scope) => now - (this.readingsAt.get(scope) ?? Number.NEGATIVE_INFINITY) >= o.maxAgeMs,
    );
    if (due.length === 0) return;
    const read = await o.call(() => readProviderLimits(o.redis, o.names, due));
    o.builder.useReadings(read);
    for (const scope of due)
      if (Object.keys(read[scope] ?? {}).length > 0) this.readingsAt.set(scope, now);
  }
}

/** Whether a request (unchecked) sends a PDF's bytes: its model's page costs are read first. */
function holdsPdf(request: unknown): boolean {
  const r = request as { model?: unknown; messages?: unknown } | null;
  if (typeof r?.model !== 'string' || !Array.isArray(r.messages)) return false;
  return r.messages.some(
    (m: { content?: unknown } | null) =>
      Array.isArray(m?.content) &&
      m.content.some(
        (b: { type?: unknown; source?: { type?: unknown } } | null) =>
          b?.type === 'document' && b.source?.type === 'base64',
      ),
  );
}
