import { EVENT_FIELDS } from '../shared/job-events.ts';
import { jobEventsKey, type QueueNames } from '../shared/keys.ts';
import type { RedisClient } from '../shared/redis.ts';

export interface StreamEventOptions {
  /** Entries kept per job (approximate trim); a reader far behind loses the oldest. @default 10_000 */
  readonly maxLen?: number;
  /** Seconds a job's stream lives after its start and after its end. @default 600 */
  readonly ttlS?: number;
}

/** One attempt's relay: events in order on one connection; `end` resolves once all are written. */
export interface EventRelay {
  start(requestId: string | null): void;
  event(name: string, data: string): void;
  /** Ends the attempt, after an error event when the call failed after it began. */
  end(error?: { readonly type: string; readonly message: string }): Promise<void>;
}

/**
 * Publishes the provider's stream events of jobs whose caller reads them (`relayEvents`) to a
 * Redis stream per job, for the gateway to relay. Writes are pipelined, not awaited one by one:
 * ioredis keeps their order on the connection.
 */
export class StreamEventPublisher {
  private readonly maxLen: number;
  private readonly ttlS: number;

  constructor(
    private readonly redis: RedisClient,
    private readonly names: QueueNames,
    options: StreamEventOptions = {},
  ) {
    this.maxLen = options.maxLen ?? 10_000;
    this.ttlS = options.ttlS ?? 600;
  }

  /** A relay for this job's attempt, or undefined when nobody reads its events. */
  open(jobId: string, relayEvents: boolean | undefined): EventRelay | undefined {
    if (!relayEvents) return undefined;
    const key = jobEventsKey(this.names, jobId);
    const add = (...fields: string[]) =>
      this.redis.xadd(key, 'MAXLEN', '~', this.maxLen, '*', ...fields).catch(() => null);
    let begun = false;
    let last: Promise<unknown> = Promise.resolve();
    // Events the SDK parsed before the call's start was reported wait for it: start comes first.
    const early: [string, string][] = [];
    const event = (name: string, data: string) => {
      last = add(EVENT_FIELDS.name, name, EVENT_FIELDS.data, data);
    };
    return {
      start: (requestId) => {
        begun = true;
        last = add(EVENT_FIELDS.start, requestId ?? '');
        void this.redis.expire(key, this.ttlS).catch(() => {});
        for (const [name, data] of early.splice(0)) event(name, data);
      },
      event: (name, data) => {
        if (begun) event(name, data);
        else early.push([name, data]);
      },
      end: async (error) => {
        // Before the response began nothing was relayed: the job's outcome speaks instead.
        if (!begun) return;
        if (error) {
          const body = JSON.stringify({ type: 'error', error });
          add(EVENT_FIELDS.name, 'error', EVENT_FIELDS.data, body);
        }
        last = add(EVENT_FIELDS.end, '1');
        await Promise.all([last, this.redis.expire(key, this.ttlS).catch(() => {})]);
      },
    };
  }
}

/** The error event a relay ends with: the provider's own error body when it sent one. */
export function relayedError(err: unknown): { type: string; message: string } {
  const body = (err as { error?: { error?: { type?: unknown; message?: unknown } } }).error;
  const e = body?.error;
  if (e && typeof e.type === 'string' && typeof e.message === 'string')
    return { type: e.type, message: e.message };
  return {
    type: 'api_error',
    message: `the call failed after it began: ${(err as Error).message}`,
  };
}
