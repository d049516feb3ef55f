/**
 * One Messages call, whatever door it came in by (the Claude API's `/v1/messages`, Bedrock's
 * `invoke`, Vertex's `rawPredict`): validation, spend cap, faults, the prompt cache and the rate
 * limits, ending in a refusal or an admitted answer for the route to write in its own shape.
 *
 * Order of checks (the first that fails decides): 400 bad field, image or PDF → 404 model not
 * Claude's → 400 `max_tokens` above the model's → 429 spend-capped key → fault draw (529, 500,
 * dropped socket or no answer at all) → 429 rate limit → admitted. Only an admitted call is charged; it is charged
 * its uncached input plus what it writes to the cache, never what it reads.
 */

import type { IncomingMessage, OutgoingHttpHeaders } from 'node:http';
import type { Answer } from './answer-events.ts';
import type { ApiErrorType } from './api-errors.ts';
import type { MidwayFault } from './faults.ts';
import { MediaError } from './media-costs.ts';
import { planOutput } from './output.ts';
import { fnv1a32 } from './prng.ts';
import type { CacheUse } from './prompt-cache.ts';
import {
  rateLimitHeaders,
  rateLimitMessage,
  retryAfterSeconds,
  spendCapMessage,
} from './rate-limit-responses.ts';
import type { Admission, Charge, OutputAccounting, RateLimiter } from './rate-limits.ts';
import {
  describeIssue,
  firstIssue,
  type MessagesRequest,
  messagesRequestSchema,
} from './request-schema.ts';
import { measureRequest } from './request-tokens.ts';
import type { MockState } from './state.ts';

/** A call as a route hands it over: who, the body's text (it seeds the answer) and the body. */
export interface CallInput {
  readonly apiKey: string;
  readonly raw: string;
  readonly body: unknown;
  /** Whether the answer is streamed (the body's `stream`, or the platform's path). */
  readonly stream: boolean;
}

export interface Refused {
  readonly kind: 'refused';
  readonly type: ApiErrorType;
  readonly message: string;
  readonly details?: { error_code: string };
  /** What the Claude API sends with it: the rate-limit readings, retry-after. */
  readonly headers: OutgoingHttpHeaders;
}

export interface Admitted {
  readonly kind: 'admitted';
  readonly answer: Answer;
  /** The rate-limit readings the Claude API sends with the answer. */
  readonly headers: OutgoingHttpHeaders;
  /** Whether the stream fails midway with an error event, or goes silent (a fault). */
  readonly midway: MidwayFault;
  /**
   * Charges the output produced so far, `sent` tokens in all (`outputAccounting: 'produced'`);
   * the answer calls it as its tokens go out.
   */
  produce(sent: number): void;
  /**
   * The response ended with `sent` tokens out: the unused output given back (`actual`), or the
   * rest of what was produced charged (`produced`).
   */
  settle(sent: number): void;
}

/** Faulted at the door: the socket closed unanswered (`dropped`), or left open, silent (`hung`). */
export interface Unanswered {
  readonly kind: 'dropped' | 'hung';
}

export type CallOutcome = Refused | Admitted | Unanswered;

/**
 * Plays an unanswered outcome on the request's connection (closed, or left open without a byte
 * until the client gives up or the server closes); false for any other outcome.
 */
export function playUnanswered(
  state: MockState,
  req: IncomingMessage,
  outcome: CallOutcome,
): outcome is Unanswered {
  if (outcome.kind !== 'dropped' && outcome.kind !== 'hung') return false;
  state.stats.response(outcome.kind);
  if (outcome.kind === 'dropped') req.socket.destroy();
  return true;
}

const refuse = (
  type: ApiErrorType,
  message: string,
  headers: OutgoingHttpHeaders = {},
  details?: { error_code: string },
): Refused => ({ kind: 'refused', type, message, headers, ...(details ? { details } : {}) });

/** Runs one call through the mock's checks; see the module comment for their order. */
export async function runCall(state: MockState, call: CallInput): Promise<CallOutcome> {
  const parsed = messagesRequestSchema.safeParse(call.body);
  if (!parsed.success) {
    return refuse('invalid_request_error', describeIssue(firstIssue(parsed.error.issues)));
  }
  const request = parsed.data;
  let segments: Awaited<ReturnType<typeof measureRequest>>;
  try {
    segments = await measureRequest(request);
  } catch (error) {
    if (error instanceof MediaError) return refuse('invalid_request_error', error.message);
    throw error;
  }
  if (!request.model.includes('claude-')) {
    return refuse('not_found_error', `model: ${request.model}`);
  }
  const most = state.options.maxOutputTokens;
  if (request.max_tokens > most) {
    return refuse(
      'invalid_request_error',
      `max_tokens: ${request.max_tokens} > ${most}, which is the maximum allowed number of output tokens for ${request.model}`,
    );
  }
  const now = Date.now();
  const front = frontDoor(state, call.apiKey, request.model, now);
  if (front) return front;

  // The prefix is written when the response begins: its first token, `latencyMs` after admission
  // (a stream's headers and message_start go out before that, at admission).
  const readableAt = now + state.latencyMs;
  const cache = state.promptCache;
  const planned = cache.plan(
    call.apiKey,
    request.model,
    segments,
    state.options.inputCounting,
    now,
    readableAt,
  );
  return admit(state, call, request, planned, now);
}

/** The spend cap and the faults drawn before admission, or nothing when the call goes on. */
function frontDoor(
  state: MockState,
  apiKey: string,
  model: string,
  now: number,
): CallOutcome | undefined {
  const { stats } = state;
  if (state.spendCappedKeys.has(apiKey)) {
    stats.rateLimited('spend_cap');
    // No retry-after: waiting minutes does not help, access returns next month.
    const headers = rateLimitHeaders(
      state.limiterFor(model).state(now),
      state.options.roundReadings,
    );
    return refuse('rate_limit_error', spendCapMessage(now), headers, {
      error_code: 'enforced_spend_limit_reached',
    });
  }
  const fault = state.faults.beforeAdmission();
  if (fault) stats.fault(fault);
  if (fault === 'drop') return { kind: 'dropped' };
  if (fault === 'hang') return { kind: 'hung' };
  if (fault === 'overloaded') return refuse('overloaded_error', 'Overloaded');
  if (fault === 'serverError') return refuse('api_error', 'Internal server error');
  return undefined;
}

/**
 * Charges `cost`, or refuses it. Under `produced` the output is charged as it comes, yet a call
 * finds no room while the output budget is spent: it must fit one output token, taken back.
 */
function consumeCall(
  limiter: RateLimiter,
  cost: Charge,
  accounting: OutputAccounting,
  now: number,
): Admission {
  if (accounting !== 'produced') return limiter.consume(cost, now);
  const one = { output_tokens: 1, tokens: 1 };
  const admission = limiter.consume(
    { ...cost, output_tokens: cost.output_tokens + 1, tokens: cost.tokens + 1 },
    now,
  );
  if (admission.admitted) limiter.refund(admission.ticket, one, now);
  return admission;
}

/** Charges the call to its model's limits, or refuses it with the limit that said no. */
function admit(
  state: MockState,
  call: CallInput,
  request: MessagesRequest,
  planned: { readonly use: CacheUse; commit(): void },
  now: number,
): CallOutcome {
  const { options, stats } = state;
  const usage = planned.use;
  const input = usage.inputTokens + usage.creationTokens;
  const output = options.outputAccounting === 'produced' ? 0 : request.max_tokens;
  const cost: Charge = {
    requests: 1,
    input_tokens: input,
    output_tokens: output,
    tokens: input + output,
  };
  const limiter = state.limiterFor(request.model);
  const admission = consumeCall(limiter, cost, options.outputAccounting, now);
  const headers: OutgoingHttpHeaders = rateLimitHeaders(limiter.state(now), options.roundReadings);
  if (!admission.admitted) {
    stats.rateLimited(admission.dimension);
    headers['retry-after'] = String(retryAfterSeconds(admission.retryAfterMs));
    // A cost above the limit itself never fits: tell the SDK not to retry it.
    if (!admission.canEverFit) headers['x-should-retry'] = 'false';
    const limit = options.limits[admission.dimension] ?? 0;
    const message = rateLimitMessage(
      admission.dimension,
      limit,
      options.windowMs,
      admission.canEverFit,
    );
    return refuse('rate_limit_error', message, headers);
  }
  // Only an admitted call reads or writes the cache.
  planned.commit();
  const record = stats.admit(now, cost);
  stats.cache(usage);
  const generation = state.generation;
  let charged = 0;
  const produce = (sent: number) => {
    if (options.outputAccounting !== 'produced' || generation !== state.generation) return;
    const more = Math.min(sent, request.max_tokens) - charged;
    if (more <= 0) return;
    charged += more;
    const amount: Partial<Charge> = { output_tokens: more, tokens: more };
    limiter.spend(amount, Date.now());
    stats.produced(record, amount);
  };
  const settle = (sent: number) => {
    produce(sent);
    if (options.outputAccounting !== 'actual' || generation !== state.generation) return;
    const unused = request.max_tokens - sent;
    if (unused <= 0) return;
    const amount: Partial<Charge> = { output_tokens: unused, tokens: unused };
    limiter.refund(admission.ticket, amount, Date.now());
    stats.refund(record, amount);
  };
  const answer: Answer = {
    request,
    output: planOutput(fnv1a32(call.raw), request.max_tokens, state.outputShare),
    usage,
    latencyMs: state.latencyMs,
    perTokenMs: state.latencyPerOutputTokenMs,
  };
  const midway = call.stream ? state.faults.midStream() : null;
  if (midway) stats.fault(midway === 'error' ? 'midStreamError' : 'stall');
  return { kind: 'admitted', answer, headers, midway, produce, settle };
}
