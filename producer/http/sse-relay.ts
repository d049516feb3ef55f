import type { ServerResponse } from 'node:http';
import type { StoredMessage } from '../../shared/job.ts';
import { EVENT_FIELDS } from '../../shared/job-events.ts';
import { jobEventsKey, type QueueNames } from '../../shared/keys.ts';
import { duplicateRedis, type RedisClient } from '../../shared/redis.ts';
import { type ApiErrorAnswer, statusText } from './anthropic-errors.ts';

/** How a gateway call ended, as the relay needs to know it. */
export type CallOutcome =
  | { readonly kind: 'done'; readonly message: StoredMessage; readonly requestId: string | null }
  | { readonly kind: 'error'; readonly error: ApiErrorAnswer }
  | { readonly kind: 'gone' };

type Entry = [id: string, fields: string[]];

/**
 * Reads jobs' event streams (see worker/stream-events.ts). Each relay blocks on a connection of
 * its own (XREAD BLOCK holds it), leased from a small pool of idle ones.
 */
export class EventStreamReader {
  private readonly idle: RedisClient[] = [];
  private readonly all = new Set<RedisClient>();
  private closed = false;

  constructor(
    private readonly redis: RedisClient,
    private readonly names: QueueNames,
    private readonly keepIdle = 16,
  ) {}

  async lease(): Promise<RedisClient> {
    const conn = this.idle.pop();
    if (conn) return conn;
    const fresh = duplicateRedis(this.redis, { node: { maxRetriesPerRequest: 1 } });
    fresh.on('error', () => {});
    this.all.add(fresh);
    return fresh;
  }

  giveBack(conn: RedisClient): void {
    if (!this.closed && this.idle.length < this.keepIdle && conn.status === 'ready')
      this.idle.push(conn);
    else this.drop(conn);
  }

  /** Entries after `from`, waiting up to `blockMs` for the first. */
  async read(conn: RedisClient, jobId: string, from: string, blockMs: number): Promise<Entry[]> {
    const key = jobEventsKey(this.names, jobId);
    const reply = (await conn.xread('BLOCK', blockMs, 'STREAMS', key, from)) as
      | [string, Entry[]][]
      | null;
    return reply?.[0]?.[1] ?? [];
  }

  /** Wakes a relay blocked on this job's stream (it then looks at the job's outcome). */
  async wake(jobId: string): Promise<void> {
    const key = jobEventsKey(this.names, jobId);
    await this.redis
      .multi()
      .xadd(key, 'MAXLEN', '~', 10_000, '*', EVENT_FIELDS.wake, '1')
      .expire(key, 600)
      .exec();
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const conn of this.all) this.drop(conn);
  }

  private drop(conn: RedisClient): void {
    this.all.delete(conn);
    conn.disconnect();
  }
}

export interface RelayOptions {
  readonly reader: EventStreamReader;
  readonly jobId: string;
  readonly res: ServerResponse;
  /** Settles once the job finished, failed or was cancelled (or the caller left). */
  readonly outcome: Promise<CallOutcome>;
  /** A ping this often while nothing else is sent (and the headers go out then at the latest). */
  readonly pingMs: number;
  readonly signal: AbortSignal;
  /** The answer's own request-id, sent until (unless) the provider's is known. */
  readonly requestId: string;
}

const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  connection: 'keep-alive',
};

const sse = (name: string, data: string) => `event: ${name}\ndata: ${data}\n\n`;

/**
 * Relays a job's stream events to the caller in order, names and data unchanged. The headers go
 * out with the call's start (with the provider's request-id) or, while the job still waits for
 * budget, with the first ping; an error before them is answered with its status instead. A job
 * that finished without relaying (a worker that does not relay, a stream already expired) is
 * replayed from its stored message.
 */
export async function relayEvents(o: RelayOptions): Promise<void> {
  const { reader, jobId, res } = o;
  let outcome: CallOutcome | undefined;
  void o.outcome.then((settled) => {
    outcome = settled;
    reader.wake(jobId).catch(() => {});
  });
  const head = (requestId: string | null) => {
    if (res.headersSent) return;
    res.writeHead(200, {
      ...SSE_HEADERS,
      'llmq-job-id': jobId,
      'request-id': requestId || o.requestId,
    });
  };
  const conn = await reader.lease();
  let last = '0-0';
  try {
    for (;;) {
      if (o.signal.aborted || res.destroyed) return;
      let entries: Entry[];
      try {
        entries = await reader.read(conn, jobId, last, o.pingMs);
      } catch {
        return fail(
          res,
          {
            type: 'overloaded_error',
            message: 'llmq: the queue is unavailable (Redis did not answer)',
          },
          o.requestId,
        );
      }
      if (entries.length === 0) {
        head(null);
        res.write(sse('ping', '{"type": "ping"}'));
        continue;
      }
      for (const [id, fields] of entries) {
        last = id;
        const [kind, value = ''] = fields;
        if (kind === EVENT_FIELDS.start) {
          head(value || null);
        } else if (kind === EVENT_FIELDS.name) {
          head(null);
          res.write(sse(value, fields[3] ?? ''));
        } else if (kind === EVENT_FIELDS.end) {
          head(null);
          res.end();
          return;
        } else if (kind === EVENT_FIELDS.wake && outcome && outcome.kind !== 'gone') {
          // The wake follows whatever the worker wrote: no end came, so nothing more will.
          return finish(res, jobId, outcome, o.requestId);
        }
      }
    }
  } finally {
    reader.giveBack(conn);
  }
}

function fail(
  res: ServerResponse,
  error: { type: string; message: string },
  requestId: string,
): void {
  const body = JSON.stringify({ type: 'error', error, request_id: requestId });
  if (!res.headersSent) {
    const status = error.type === 'overloaded_error' ? 529 : 500;
    res.writeHead(status, statusText(status), {
      'content-type': 'application/json',
      'request-id': requestId,
    });
    res.end(body);
    return;
  }
  res.end(sse('error', body));
}

function finish(res: ServerResponse, jobId: string, outcome: CallOutcome, requestId: string): void {
  if (outcome.kind === 'error') {
    const body = JSON.stringify({ ...outcome.error.body, request_id: requestId });
    if (!res.headersSent) {
      res.writeHead(outcome.error.status, statusText(outcome.error.status), {
        'content-type': 'application/json',
        ...outcome.error.headers,
        'llmq-job-id': jobId,
        'request-id': requestId,
      });
      res.end(body);
    } else {
      res.end(sse('error', body));
    }
    return;
  }
  if (outcome.kind !== 'done') return;
  if (!res.headersSent) {
    res.writeHead(200, {
      ...SSE_HEADERS,
      'llmq-job-id': jobId,
      'request-id': outcome.requestId || requestId,
    });
  }
  for (const [name, data] of replayEvents(outcome.message))
    res.write(sse(name, JSON.stringify(data)));
  res.end();
}

/** The events of a stream that would have produced `m` (text as one delta per block). */
export function replayEvents(m: StoredMessage): [string, unknown][] {
  const out: [string, unknown][] = [
    [
      'message_start',
      {
        type: 'message_start',
        message: {
          ...messageBody(m),
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { ...m.usage, output_tokens: 0 },
        },
      },
    ],
  ];
  m.content.forEach((b, index) => {
    if (b.type === 'text') {
      out.push([
        'content_block_start',
        { type: 'content_block_start', index, content_block: { ...b, text: '' } },
      ]);
      out.push([
        'content_block_delta',
        { type: 'content_block_delta', index, delta: { type: 'text_delta', text: b.text ?? '' } },
      ]);
    } else {
      out.push(['content_block_start', { type: 'content_block_start', index, content_block: b }]);
    }
    out.push(['content_block_stop', { type: 'content_block_stop', index }]);
  });
  out.push([
    'message_delta',
    {
      type: 'message_delta',
      delta: { stop_reason: m.stop_reason, stop_sequence: m.stop_sequence },
      usage: m.usage,
    },
  ]);
  out.push(['message_stop', { type: 'message_stop' }]);
  return out;
}

/** A stored message as the API's Message body, in the API's key order. */
export function messageBody(m: StoredMessage): Record<string, unknown> {
  return {
    id: m.id,
    type: 'message',
    role: m.role,
    model: m.model,
    content: m.content,
    stop_reason: m.stop_reason,
    stop_sequence: m.stop_sequence,
    usage: m.usage,
  };
}
