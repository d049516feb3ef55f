import type { Redis } from 'ioredis';
import { CostExceedsLimitError } from '../shared/errors.ts';
import { estimateCost } from '../shared/estimate.ts';
import { JOB_NAME, type JobData } from '../shared/job.ts';
import type { QueueNames } from '../shared/keys.ts';
import { type DimensionLimits, GLOBAL_SCOPE } from '../shared/limiter/types.ts';
import { type PriorityLane, resolvePriority } from '../shared/priority.ts';
import { type LlmqQueue, openQueue, registerQueue } from '../shared/queues.ts';
import { parseMessagesRequest } from '../shared/request.ts';

export interface ProducerOptions {
  /** A connection the producer uses but does not own. */
  readonly redis: Redis;
  readonly names: QueueNames;
  /** Limits of the global scope, to refuse a job that could never fit. */
  readonly limits?: DimensionLimits;
  /** Limits of nested scopes (`tenant:acme`). */
  readonly scopes?: Readonly<Record<string, DimensionLimits>>;
}

export interface EnqueueOptions {
  /** A lane or a number, 1 the most urgent. @default 'default' */
  readonly priority?: PriorityLane | number;
  readonly tenant?: string;
  /** Stream the response. */
  readonly stream?: boolean;
  /** Per-call timeout in ms. @default 600_000 */
  readonly timeoutMs?: number;
  /** Tries for retryable failures. @default 5 */
  readonly attempts?: number;
  /** Free-form labels kept with the job. */
  readonly meta?: Record<string, string>;
}

const DIM_ORDER = ['requests', 'inputTokens', 'outputTokens', 'tokens'] as const;

/**
 * Adds Messages requests to a queue: validated, costed (input estimate erring high plus the
 * whole of max_tokens) and refused when they could never fit a limit.
 */
export class Producer {
  readonly queue: LlmqQueue;
  private readonly redis: Redis;
  private readonly names: QueueNames;
  private readonly limits: DimensionLimits;
  private readonly scopeLimits: Readonly<Record<string, DimensionLimits>>;
  private registered = false;

  constructor(options: ProducerOptions) {
    this.redis = options.redis;
    this.names = options.names;
    this.limits = options.limits ?? {};
    this.scopeLimits = options.scopes ?? {};
    this.queue = openQueue(this.redis, this.names);
  }

  /** Builds the job's data, or throws a typed error; writes nothing. */
  prepare(request: unknown, options: EnqueueOptions = {}): JobData {
    const req = parseMessagesRequest(request);
    const { stream: _ignored, ...clean } = req;
    const cost = estimateCost(clean);
    const scopes = options.tenant ? [`tenant:${options.tenant}`] : [];
    for (const scope of [GLOBAL_SCOPE, ...scopes]) {
      const limits = scope === GLOBAL_SCOPE ? this.limits : (this.scopeLimits[scope] ?? {});
      for (const dim of DIM_ORDER) {
        const limit = limits[dim];
        const need = dim === 'tokens' ? cost.inputTokens + cost.outputTokens : cost[dim];
        if (limit !== undefined && need > limit) throw new CostExceedsLimitError(scope, dim, need, limit);
      }
    }
    return {
      v: 1,
      request: clean,
      cost,
      priority: resolvePriority(options.priority),
      tenant: options.tenant,
      scopes: scopes.length > 0 ? scopes : undefined,
      stream: options.stream ?? req.stream,
      timeoutMs: options.timeoutMs,
      enqueuedAt: Date.now(),
      meta: options.meta,
    };
  }

  /** Validates, costs and adds one request; resolves with the job id. */
  async enqueue(request: unknown, options: EnqueueOptions = {}): Promise<string> {
    const data = this.prepare(request, options);
    if (!this.registered) {
      await registerQueue(this.redis, this.names);
      this.registered = true;
    }
    const job = await this.queue.add(JOB_NAME, data, {
      priority: data.priority,
      attempts: options.attempts ?? 5,
      removeOnComplete: { age: 7 * 24 * 3600, count: 100_000 },
      removeOnFail: { age: 7 * 24 * 3600 },
    });
    return job.id!;
  }

  async close(): Promise<void> {
    await this.queue.close();
  }
}
