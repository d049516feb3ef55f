import { setTimeout as sleep } from 'node:timers/promises';
import type { Producer } from '../../../producer/producer.ts';
import { LlmqError } from '../../../shared/errors.ts';

/** A short request of the chaos run: a few tokens in, `maxTokens` out. */
export function chaosRequest(model: string, maxTokens: number, text: string) {
  return { model, max_tokens: maxTokens, messages: [{ role: 'user' as const, content: text }] };
}

/** What a feeder was told, and what it saw on the way. */
export interface Feeder {
  /** Ids answered to the feeder (an enqueue resolved, a 202), in order. */
  readonly acknowledged: string[];
  /** Failures by what they were (an error code, `503 redis_unavailable`, `ECONNREFUSED`). */
  readonly failures: Record<string, number>;
  /** Resolves when every job is acknowledged (or the run stopped it). */
  readonly done: Promise<void>;
}

/** What the feeders wait on: add only while fewer than `backlog` jobs wait or run. */
export interface Pace {
  room(): boolean;
  readonly signal: AbortSignal;
}

async function waitForRoom(pace: Pace): Promise<void> {
  while (!pace.room() && !pace.signal.aborted) await sleep(100);
}

function tally(failures: Record<string, number>, what: string): void {
  failures[what] = (failures[what] ?? 0) + 1;
}

/**
 * Adds `total` jobs with `enqueueMany`, `chunk` at a time, each under an idempotency key of its
 * own: a chunk that failed (Redis gone) is sent again whole, and adds only what is missing.
 */
export function feedLibrary(o: {
  readonly producer: Producer;
  readonly total: number;
  readonly chunk: number;
  readonly request: (i: number) => unknown;
  readonly pace: Pace;
}): Feeder {
  const acknowledged: string[] = [];
  const failures: Record<string, number> = {};
  const done = (async () => {
    for (let start = 0; start < o.total && !o.pace.signal.aborted; start += o.chunk) {
      await waitForRoom(o.pace);
      const idx = Array.from({ length: Math.min(o.chunk, o.total - start) }, (_, j) => start + j);
      for (;;) {
        if (o.pace.signal.aborted) return;
        try {
          const ids = await o.producer.enqueueMany(
            idx.map((i) => o.request(i)),
            { idempotencyKeys: idx.map((i) => `chaos-lib-${i}`) },
          );
          acknowledged.push(...ids);
          break;
        } catch (err) {
          tally(failures, err instanceof LlmqError ? err.code : (err as Error).name);
          await sleep(250);
        }
      }
    }
  })();
  return { acknowledged, failures, done };
}

/** One answer of `POST /v1/jobs` (or the network error instead of one). */
export interface HttpAnswer {
  readonly at: number;
  /** The status, or the network error's code (`ECONNREFUSED`). */
  readonly status: number | string;
  /** The body's `error.code`. */
  readonly code?: string;
  readonly retryAfter?: string;
  readonly id?: string;
}

/** Posts one job to `POST /v1/jobs`; never throws. */
export async function postJob(
  url: string,
  apiKey: string,
  body: Readonly<Record<string, unknown>>,
  timeoutMs = 15_000,
): Promise<HttpAnswer> {
  const at = Date.now();
  try {
    const res = await fetch(`${url}/v1/jobs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const json = (await res.json().catch(() => ({}))) as {
      id?: string;
      error?: { code?: string };
    };
    const retryAfter = res.headers.get('retry-after') ?? undefined;
    return {
      at,
      status: res.status,
      ...(json.error?.code ? { code: json.error.code } : {}),
      ...(retryAfter ? { retryAfter } : {}),
      ...(res.status === 202 && json.id ? { id: json.id } : {}),
    };
  } catch (err) {
    const cause = (err as { cause?: { code?: string } }).cause;
    return { at, status: cause?.code ?? (err as Error).name };
  }
}

/**
 * `clients` HTTP clients posting `total` jobs to `llmq serve` between them, each job under an
 * idempotency key of its own and sent again until it is answered 202, as a careful client does
 * when the server is down or answers 503. Every answer is kept in `answers`.
 */
export function feedHttp(o: {
  readonly url: string;
  readonly apiKey: string;
  readonly total: number;
  readonly clients: number;
  readonly request: (i: number) => unknown;
  readonly pace: Pace;
  readonly answers: HttpAnswer[];
}): Feeder {
  const acknowledged: string[] = [];
  const failures: Record<string, number> = {};
  let next = 0;
  const client = async () => {
    while (next < o.total && !o.pace.signal.aborted) {
      const i = next++;
      await waitForRoom(o.pace);
      for (;;) {
        if (o.pace.signal.aborted) return;
        const a = await postJob(o.url, o.apiKey, {
          request: o.request(i),
          idempotency_key: `chaos-http-${i}`,
        });
        o.answers.push(a);
        if (a.id) {
          acknowledged.push(a.id);
          break;
        }
        tally(failures, a.code ? `${a.status} ${a.code}` : String(a.status));
        await sleep(200);
      }
    }
  };
  const done = Promise.all(Array.from({ length: o.clients }, client)).then(() => {});
  return { acknowledged, failures, done };
}
