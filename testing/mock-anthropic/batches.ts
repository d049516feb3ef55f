/**
 * The Message Batches endpoints of the mock (`client.messages.batches`): create, retrieve, list,
 * cancel, results (JSONL at `results_url`). A batch is "processing" for `processingMs` after it
 * was created, then ended; its items are answered by the same deterministic "model" as
 * `/v1/messages`, outside the per-minute limits. Results come in an order unlike the requests'.
 *
 * Faults, set with `setBatchFaults` (or `POST /__batch-faults`), are counters so tests are exact:
 * the next `erroredItems` items come back `errored` with `erroredType`, and the next
 * `expiredBatches` batches expire with only their first half answered.
 */

import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { messageBody } from './answer-events.ts';
import { type ApiErrorType, apiErrorBody, ERROR_STATUS } from './api-errors.ts';
import { apiKeyOf, MISSING_KEY_MESSAGE } from './auth.ts';
import { readBody, sendJson } from './http-io.ts';
import { MediaError } from './media-costs.ts';
import { type OutputShare, planOutput } from './output.ts';
import { fnv1a32 } from './prng.ts';
import { describeIssue, firstIssue, messagesRequestSchema } from './request-schema.ts';
import { countRequestTokens } from './request-tokens.ts';

/** The real API's bounds: 100,000 requests or 256 MB a batch. */
export const BATCH_MAX_REQUESTS = 100_000;
export const BATCH_MAX_BYTES = 256 * 1024 * 1024;
const CUSTOM_ID = /^[a-zA-Z0-9_-]{1,64}$/;
/** A canceled batch is `canceling` this long before it ends. */
const CANCEL_MS = 50;

/**
 * Faults of the mock's Message Batches: items that end in error, batches that expire.
 * @inline
 */
export interface BatchFaults {
  /** The next this many items (in processing order) come back errored. @default 0 */
  readonly erroredItems?: number;
  /** The error type of those items. @default 'overloaded_error' (retryable) */
  readonly erroredType?: ApiErrorType;
  /** The next this many batches expire, their second half unanswered. @default 0 */
  readonly expiredBatches?: number;
}

/**
 * How the mock's Message Batches behave: how long a batch takes, how many requests it takes.
 * @inline
 */
export interface BatchOptions {
  /** How long a batch processes before it ends, ms. @default 200 */
  readonly processingMs?: number;
  /** Most requests in one batch. @default 100_000 */
  readonly maxRequests?: number;
}

/**
 * What the mock saw of batches (for tests: "none created twice").
 * @inline
 */
export interface BatchStats {
  readonly created: number;
  readonly items: number;
  readonly canceled: number;
  readonly resultsFetched: number;
}

type ItemResult =
  | { type: 'succeeded'; message: unknown }
  | { type: 'errored'; error: { type: 'error'; error: { type: string; message: string } } }
  | { type: 'canceled' }
  | { type: 'expired' };

/** A batch's item as created: its input tokens read then (PDFs are read asynchronously). */
interface BatchItem {
  readonly custom_id: string;
  readonly params: unknown;
  /** Its input tokens, or the 400 of an image or PDF the API would refuse. */
  readonly input: number | MediaError | undefined;
}

interface MockBatch {
  readonly id: string;
  readonly createdAt: number;
  readonly endsAt: number;
  readonly requests: readonly BatchItem[];
  readonly expire: boolean;
  cancelAt?: number;
  results?: { custom_id: string; result: ItemResult }[];
}

/** What the batches read of the server's state: its output share, which may change at runtime. */
export interface BatchOutputs {
  readonly outputShare: OutputShare;
}

/** The batches of one mock server. */
export class BatchStore {
  private readonly batches = new Map<string, MockBatch>();
  private faults = { erroredItems: 0, erroredType: 'overloaded_error' as ApiErrorType, expired: 0 };
  processingMs = 200;
  maxRequests = BATCH_MAX_REQUESTS;
  private counts = { created: 0, items: 0, canceled: 0, resultsFetched: 0 };

  constructor(private readonly state: BatchOutputs) {}

  setFaults(f: BatchFaults): void {
    this.faults = {
      erroredItems: f.erroredItems ?? 0,
      erroredType: f.erroredType ?? 'overloaded_error',
      expired: f.expiredBatches ?? 0,
    };
  }

  setOptions(o: BatchOptions): void {
    if (o.processingMs !== undefined) this.processingMs = o.processingMs;
    if (o.maxRequests !== undefined) this.maxRequests = o.maxRequests;
  }

  stats(): BatchStats {
    return { ...this.counts };
  }

  reset(): void {
    this.batches.clear();
    this.counts = { created: 0, items: 0, canceled: 0, resultsFetched: 0 };
    this.setFaults({});
  }

  /** Counts each request's input (a valid one's), for its answer when the batch ends. */
  async measure(requests: readonly { custom_id: string; params: unknown }[]): Promise<BatchItem[]> {
    const items: BatchItem[] = [];
    for (const r of requests) {
      const parsed = messagesRequestSchema.safeParse(r.params);
      let input: BatchItem['input'];
      if (parsed.success) {
        input = await countRequestTokens(parsed.data).catch((error: unknown) => {
          if (error instanceof MediaError) return error;
          throw error;
        });
      }
      items.push({ ...r, input });
    }
    return items;
  }

  create(requests: readonly BatchItem[], now: number): MockBatch {
    const expire = this.faults.expired > 0;
    if (expire) this.faults.expired--;
    const batch: MockBatch = {
      id: `msgbatch_01${randomBytes(11).toString('hex')}`,
      createdAt: now,
      endsAt: now + this.processingMs,
      requests,
      expire,
    };
    this.batches.set(batch.id, batch);
    this.counts.created++;
    this.counts.items += requests.length;
    return batch;
  }

  get(id: string, now: number): MockBatch | undefined {
    const b = this.batches.get(id);
    if (
      b &&
      !b.results &&
      now >= Math.min(b.endsAt, (b.cancelAt ?? Number.POSITIVE_INFINITY) + CANCEL_MS)
    )
      this.finish(b);
    return b;
  }

  list(now: number): MockBatch[] {
    return [...this.batches.keys()].map((id) => this.get(id, now)!).reverse();
  }

  cancel(b: MockBatch, now: number): void {
    if (b.results || b.cancelAt !== undefined) return;
    b.cancelAt = now;
    this.counts.canceled++;
  }

  fetched(): void {
    this.counts.resultsFetched++;
  }

  /** Answers every item, once; then puts the results in an order unlike the requests'. */
  private finish(b: MockBatch): void {
    const half = Math.ceil(b.requests.length / 2);
    const results = b.requests.map((r, i): { custom_id: string; result: ItemResult } => {
      if (b.cancelAt !== undefined) return { custom_id: r.custom_id, result: { type: 'canceled' } };
      if (b.expire && i >= half) return { custom_id: r.custom_id, result: { type: 'expired' } };
      return { custom_id: r.custom_id, result: this.answer(r) };
    });
    results.sort((x, y) => fnv1a32(x.custom_id) - fnv1a32(y.custom_id));
    b.results = results;
  }

  private answer({ params, input }: BatchItem): ItemResult {
    const errored = (type: string, message: string): ItemResult => ({
      type: 'errored',
      error: { type: 'error', error: { type, message } },
    });
    const parsed = messagesRequestSchema.safeParse(params);
    if (!parsed.success)
      return errored('invalid_request_error', describeIssue(firstIssue(parsed.error.issues)));
    if (input instanceof MediaError) return errored('invalid_request_error', input.message);
    if (!parsed.data.model.startsWith('claude-'))
      return errored('not_found_error', `model: ${parsed.data.model}`);
    if (this.faults.erroredItems > 0) {
      this.faults.erroredItems--;
      const type = this.faults.erroredType;
      return errored(type, type === 'overloaded_error' ? 'Overloaded' : `mock ${type}`);
    }
    const request = parsed.data;
    const inputTokens = input ?? 0;
    const output = planOutput(
      fnv1a32(JSON.stringify(params)),
      request.max_tokens,
      this.state.outputShare,
    );
    const usage = {
      inputTokens,
      creationTokens: 0,
      readTokens: 0,
      creation5m: 0,
      creation1h: 0,
    };
    return { type: 'succeeded', message: messageBody({ request, output, usage }) };
  }
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

/** The batch as the API shows it. */
function batchBody(b: MockBatch, baseUrl: string) {
  const counts = { processing: 0, succeeded: 0, errored: 0, canceled: 0, expired: 0 };
  if (b.results) for (const r of b.results) counts[r.result.type]++;
  else counts.processing = b.requests.length;
  const ended = b.results !== undefined;
  return {
    id: b.id,
    type: 'message_batch',
    processing_status: ended ? 'ended' : b.cancelAt !== undefined ? 'canceling' : 'in_progress',
    request_counts: counts,
    created_at: iso(b.createdAt),
    expires_at: iso(b.createdAt + 24 * 3600_000),
    ended_at: ended ? iso(Math.min(b.endsAt, b.cancelAt ?? b.endsAt)) : null,
    cancel_initiated_at: b.cancelAt !== undefined ? iso(b.cancelAt) : null,
    archived_at: null,
    results_url: ended ? `${baseUrl}/v1/messages/batches/${b.id}/results` : null,
  };
}

/** Routes `/v1/messages/batches…`; false when the path is not one of them. */
export async function handleBatches(
  req: IncomingMessage,
  res: ServerResponse,
  store: BatchStore,
  requestId: string,
): Promise<boolean> {
  const url = new URL(req.url ?? '/', 'http://mock');
  const m = /^\/v1\/messages\/batches(?:\/([^/]+)(?:\/(cancel|results))?)?$/.exec(url.pathname);
  if (!m) return false;
  const [, id, action] = m;
  const fail = (type: ApiErrorType, message: string) =>
    sendJson(res, ERROR_STATUS[type], apiErrorBody(type, message, requestId));
  const raw = await readBody(req, BATCH_MAX_BYTES);
  if (apiKeyOf(req) === undefined) {
    fail('authentication_error', MISSING_KEY_MESSAGE);
    return true;
  }
  const baseUrl = `http://${req.headers.host ?? '127.0.0.1'}`;
  const now = Date.now();
  const method = req.method ?? 'GET';
  if (id === undefined) {
    if (method === 'POST') {
      const checked = checkCreate(raw, store.maxRequests);
      if (typeof checked === 'string') fail('invalid_request_error', checked);
      else if (checked === null)
        fail('request_too_large', 'Batch exceeds the maximum allowed size of 256 MB.');
      else sendJson(res, 200, batchBody(store.create(await store.measure(checked), now), baseUrl));
    } else if (method === 'GET') {
      const data = store.list(now).map((b) => batchBody(b, baseUrl));
      sendJson(res, 200, {
        data,
        has_more: false,
        first_id: data[0]?.id ?? null,
        last_id: data.at(-1)?.id ?? null,
      });
    } else fail('not_found_error', 'Not found');
    return true;
  }
  const batch = store.get(id, now);
  if (!batch) {
    fail('not_found_error', `message_batch: ${id}`);
    return true;
  }
  if (action === 'cancel' && method === 'POST') {
    store.cancel(batch, now);
    sendJson(res, 200, batchBody(store.get(id, now)!, baseUrl));
  } else if (action === 'results' && method === 'GET') {
    if (!batch.results) {
      fail('invalid_request_error', `message_batch ${id} has not ended; its results are not ready`);
      return true;
    }
    store.fetched();
    const text = batch.results.map((r) => JSON.stringify(r)).join('\n');
    res.writeHead(200, { 'content-type': 'application/binary' });
    res.end(`${text}\n`);
  } else if (action === undefined && method === 'GET') {
    sendJson(res, 200, batchBody(batch, baseUrl));
  } else fail('not_found_error', 'Not found');
  return true;
}

/** The requests of a create body, a 400 message, or null when over the size limit. */
function checkCreate(
  raw: string | null,
  maxRequests: number,
): MockBatch['requests'] | string | null {
  if (raw === null) return null;
  let body: { requests?: unknown };
  try {
    body = JSON.parse(raw) as { requests?: unknown };
  } catch {
    return 'There was an error parsing the body of your request: it is not valid JSON.';
  }
  const requests = body?.requests;
  if (!Array.isArray(requests) || requests.length === 0)
    return 'requests: at least one request is required';
  if (requests.length > maxRequests)
    return `requests: a batch holds at most ${maxRequests} requests, got ${requests.length}`;
  const seen = new Set<string>();
  for (const [i, r] of requests.entries()) {
    const cid = (r as { custom_id?: unknown })?.custom_id;
    if (typeof cid !== 'string' || !CUSTOM_ID.test(cid))
      return `requests.${i}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'`;
    if (seen.has(cid)) return `requests.${i}.custom_id: duplicate custom_id ${cid}`;
    seen.add(cid);
    const params = (r as { params?: unknown }).params;
    if (params === null || typeof params !== 'object')
      return `requests.${i}.params: Field required`;
    if ((params as { stream?: unknown }).stream === true)
      return `requests.${i}.params.stream: streaming is not supported in batches`;
  }
  return requests as MockBatch['requests'];
}
