import { loadLuaScripts, runLua } from '../shared/lua-scripts.ts';
import type { DeadLetterQueue } from '../shared/queues.ts';
import type { RedisClient } from '../shared/redis.ts';

const SCRIPTS = loadLuaScripts(new URL('./lua', import.meta.url).pathname);

const DAY_MS = 86_400_000;
const MB = 1024 ** 2;

/**
 * How much a queue's dead letters may hold; 0 leaves a bound off.
 * @inline
 */
export interface DeadLetterBounds {
  /** A letter older than this goes. @default 30 days */
  readonly maxAgeMs: number;
  /** Bytes of the queue's letters. @default 256mb */
  readonly maxBytes: number;
  /** Bytes of one tenant's letters. @default 64mb */
  readonly tenantMaxBytes: number;
}

export const DEFAULT_DEAD_LETTER_BOUNDS: DeadLetterBounds = {
  maxAgeMs: 30 * DAY_MS,
  maxBytes: 256 * MB,
  tenantMaxBytes: 64 * MB,
};

/**
 * The keys that count a queue's dead letters, beside its dead-letter queue (BullMQ's prefix is
 * llmq's `bullPrefix`, so these are `llmqKey(names, 'dead', …)`).
 */
function keysOf(dlq: DeadLetterQueue) {
  const base = `${dlq.opts.prefix}`;
  const key = (...parts: string[]) => [base, 'dead', ...parts].join(':');
  return {
    sizes: key('sizes'),
    order: key('order'),
    bytes: key('bytes'),
    tenantOrders: `${key('order', 't')}:`,
    metrics: `${base}:metrics`,
  };
}

/** The connection the dead-letter queue was opened on (llmq always opens it on a client). */
const clientOf = (dlq: DeadLetterQueue) => dlq.opts.connection as RedisClient;

/**
 * Counts a letter just added and drops the oldest letters while a bound is passed (see
 * lua/keepDead-5.lua); resolves with the ids dropped. `now` is for tests (Redis's clock else).
 */
export async function keepDeadLetter(
  dlq: DeadLetterQueue,
  letter: { readonly id: string; readonly bytes: number; readonly tenant: string | undefined },
  bounds: DeadLetterBounds = DEFAULT_DEAD_LETTER_BOUNDS,
  now?: number,
): Promise<string[]> {
  const k = keysOf(dlq);
  return (await runLua(
    clientOf(dlq),
    SCRIPTS['keepDead']!,
    [k.sizes, k.order, k.bytes, dlq.keys['wait']!, k.metrics],
    [
      dlq.toKey(''),
      k.tenantOrders,
      letter.id,
      letter.bytes,
      letter.tenant ?? '',
      bounds.maxAgeMs,
      bounds.maxBytes,
      bounds.tenantMaxBytes,
      now ?? '',
    ],
  )) as string[];
}

/** Forgets a letter's bytes once it left (retried, purged, removed). */
export async function forgetDeadLetter(dlq: DeadLetterQueue, id: string): Promise<void> {
  const k = keysOf(dlq);
  await runLua(
    clientOf(dlq),
    SCRIPTS['forgetDead']!,
    [k.sizes, k.order, k.bytes],
    [k.tenantOrders, id],
  );
}

/** What a queue's dead letters hold, and what the bounds dropped. */
export interface DeadLetterHeld {
  readonly bytes: number;
  /** Bytes by tenant. */
  readonly tenants: Readonly<Record<string, number>>;
  readonly dropped: number;
  readonly droppedBytes: number;
}

/** Reads what a queue's dead letters hold (`llmq dlq list`, status, metrics). */
export async function deadLetterHeld(dlq: DeadLetterQueue): Promise<DeadLetterHeld> {
  const k = keysOf(dlq);
  const redis = clientOf(dlq);
  const [bytes, metrics] = await Promise.all([
    redis.hgetall(k.bytes),
    redis.hmget(k.metrics, 'dead_letters_dropped', 'dead_letter_bytes_dropped'),
  ]);
  const tenants: Record<string, number> = {};
  for (const [f, v] of Object.entries(bytes))
    if (f.startsWith('t:')) tenants[f.slice(2)] = Number(v);
  return {
    bytes: Number(bytes['*'] ?? 0),
    tenants,
    dropped: Number(metrics[0] ?? 0),
    droppedBytes: Number(metrics[1] ?? 0),
  };
}
