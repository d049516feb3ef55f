import { APIConnectionError, APIConnectionTimeoutError, APIError } from '@anthropic-ai/sdk';
import { describe, expect, it } from 'vitest';
import type { AttemptRecord } from '../shared/job.ts';
import { classifyProviderError } from '../worker/classify.ts';
import { decideOutcome, MAX_HISTORY, type OutcomeInput } from '../worker/outcome.ts';

/** An SDK error as the provider's answer would raise it. */
function providerError(status: number, type: string, message: string, headers = {}) {
  return APIError.generate(
    status,
    { type: 'error', error: { type, message } },
    message,
    new Headers(headers),
  );
}

/** An `event: error` inside a stream that had begun, as the SDK raises it. */
function midStream(type: string, message: string) {
  return new APIError(undefined, { type: 'error', error: { type, message } }, undefined, undefined);
}

const tried = (n: number, counted = true): AttemptRecord[] =>
  Array.from({ length: n }, (_, i) => ({ at: i, outcome: 'retryable', counted }));

const NOW = 10_000_000;
const TEN_MINUTES = 600_000;

/** The policy for `err` with a job that has `history` behind it, 5 attempts and 10 minutes. */
function decide(err: unknown, more: Partial<OutcomeInput> = {}) {
  return decideOutcome({
    failure: classifyProviderError(err),
    history: [],
    rateLimitReturns: 0,
    attemptsAllowed: 5,
    maxRateLimitReturns: 20,
    healthy: true,
    retryForMs: TEN_MINUTES,
    now: NOW,
    outageMs: 0,
    startedAt: 1_000,
    latencyMs: 12.4,
    backoff: { baseMs: 1_000, capMs: 60_000 },
    random: () => 0.5,
    ...more,
  });
}

const rateLimited = () =>
  providerError(429, 'rate_limit_error', 'Number of request tokens has exceeded your limit.', {
    'retry-after': '3',
  });

describe('the outcome of a failed call', () => {
  it('requeues a 429 with retry-after without spending an attempt', () => {
    const out = decide(rateLimited(), { history: tried(2), rateLimitReturns: 4 });
    expect(out).toMatchObject({ action: 'requeue', returns: 5 });
    expect(out.history).toHaveLength(3);
    expect(out.history[2]).toMatchObject({
      outcome: 'rate_limited',
      counted: false,
      status: 429,
      at: 1_000,
      latencyMs: 12,
    });
  });

  it('dead-letters a job once its 429s with retry-after pass the bound', () => {
    expect(decide(rateLimited(), { rateLimitReturns: 19 }).action).toBe('requeue');
    const out = decide(rateLimited(), { rateLimitReturns: 20 });
    expect(out.action).toBe('dead-letter');
    if (out.action !== 'dead-letter') return;
    expect(out.cause.reason).toBe(
      'rate limited 21 times: rate limited: Number of request tokens has exceeded your limit.',
    );
  });

  it.each([
    [429, 'rate_limit_error', 'Too many requests.', {}, '429 without retry-after'],
    [
      429,
      'rate_limit_error',
      'Request too large.',
      { 'retry-after': '3', 'x-should-retry': 'false' },
      '429 not retryable',
    ],
    [
      429,
      'rate_limit_error',
      'You have reached your specified API usage limits.',
      { 'retry-after': '3' },
      'spend limit reached',
    ],
    [400, 'invalid_request_error', 'max_tokens: Field required', {}, '400 invalid_request_error'],
    [401, 'authentication_error', 'invalid x-api-key', {}, '401 authentication_error'],
    [403, 'permission_error', 'Your API key does not have permission.', {}, '403 permission_error'],
    [404, 'not_found_error', 'model: claude-nope', {}, '404 not_found_error'],
    [413, 'request_too_large', 'Request exceeds the maximum size', {}, '413 request_too_large'],
  ])(
    'dead-letters a %i (%s: %s) at once, with the provider’s message',
    (status, type, message, headers, prefix) => {
      const out = decide(providerError(status, type, message, headers), { history: tried(1) });
      expect(out.action).toBe('dead-letter');
      if (out.action !== 'dead-letter') return;
      expect(out.cause).toMatchObject({ status, providerType: type, providerMessage: message });
      expect(out.cause.reason).toBe(`${prefix}: ${message}`);
      expect(out.history.at(-1)).toMatchObject({ outcome: 'final', counted: true, status });
    },
  );

  const transient: [string, unknown][] = [
    ['a 529', providerError(529, 'overloaded_error', 'Overloaded')],
    ['a 500', providerError(500, 'api_error', 'Internal server error')],
    ['a 504', providerError(504, 'timeout_error', 'Gateway timeout')],
    ['a timeout', new APIConnectionTimeoutError()],
    ['a dropped connection', new APIConnectionError({ message: 'socket hang up' })],
    ['an overloaded event mid-stream', midStream('overloaded_error', 'Overloaded')],
    ['an api_error event mid-stream', midStream('api_error', 'Internal server error')],
  ];

  it.each(transient)(
    'retries %s by time: no attempt spent, whatever the attempts so far',
    (_, err) => {
      // Four attempts spent on other failures, and one left: a transient failure spends none.
      const out = decide(err, { history: tried(4), outageMs: 7_000 });
      expect(out).toMatchObject({
        action: 'back-off',
        retrying: { since: NOW, outageMs: 7_000 },
      });
      expect(out.history.at(-1)).toMatchObject({
        outcome: 'retryable',
        counted: false,
        transient: true,
      });
      // Nine minutes on, the clock it started still runs, and the job still retries.
      const later = decide(err, {
        history: [...tried(4), ...tried(30, false)],
        retrying: { since: NOW - 540_000, outageMs: 0 },
      });
      expect(later).toMatchObject({ action: 'back-off', retrying: { since: NOW - 540_000 } });
    },
  );

  it.each(transient)('dead-letters %s once retryFor is used up, history kept', (_, err) => {
    const history = tried(12, false);
    const out = decide(err, { history, retrying: { since: NOW - TEN_MINUTES, outageMs: 0 } });
    expect(out.action).toBe('dead-letter');
    if (out.action !== 'dead-letter') return;
    const c = classifyProviderError(err);
    expect(out.cause.reason).toBe(
      `transient failures for 10m 0s, past its retryFor of 10m 0s: ${c.reason}`,
    );
    expect(out.history).toHaveLength(13);
    expect(out.history.at(-1)).toMatchObject({ transient: true, counted: false });
  });

  it('backs off with full jitter by the number of transient tries, capped', () => {
    const overloaded = providerError(529, 'overloaded_error', 'Overloaded');
    const transientTries = (n: number) =>
      Array.from({ length: n }, (_, i) => ({
        at: i,
        outcome: 'retryable' as const,
        counted: false,
        transient: true as const,
      }));
    const retrying = { since: NOW - 1_000, outageMs: 0 };
    // The third transient try: the wait is drawn from [0, 1 s · 2²); random() = 0.5 its middle.
    expect(decide(overloaded, { history: transientTries(2), retrying })).toMatchObject({
      action: 'back-off',
      delayMs: 2_000,
    });
    expect(
      decide(overloaded, { history: transientTries(2), retrying, random: () => 0 }),
    ).toMatchObject({ delayMs: 0 });
    // The cap bounds the wait however many tries went before.
    const late = decide(overloaded, { history: transientTries(40), retrying, random: () => 0.999 });
    expect(late).toMatchObject({ action: 'back-off', delayMs: 59_940 });
    // The last try goes when the time runs out, not a whole backoff after.
    const nearEnd = { since: NOW - TEN_MINUTES + 1_500, outageMs: 0 };
    expect(
      decide(overloaded, { history: transientTries(40), retrying: nearEnd, random: () => 0.999 }),
    ).toMatchObject({ action: 'back-off', delayMs: 1_500 });
  });

  it('leaves time behind an open breaker out of retryFor', () => {
    const overloaded = providerError(529, 'overloaded_error', 'Overloaded');
    // Started 15 minutes ago, when the breaker's outages came to 2 s; 8 minutes of outage since.
    const retrying = { since: NOW - 900_000, outageMs: 2_000 };
    // 7 minutes counted: 3 left.
    const out = decide(overloaded, { retrying, outageMs: 2_000 + 480_000 });
    expect(out).toMatchObject({ action: 'back-off', retrying });
    // Without the outage, the same failure is past its time.
    expect(decide(overloaded, { retrying, outageMs: 2_000 }).action).toBe('dead-letter');
    // A breaker reset (its total below the clock's): nothing is left out.
    expect(decide(overloaded, { retrying, outageMs: 0 }).action).toBe('dead-letter');
  });

  it('in an outage, retries a transient failure at once and never dead-letters it', () => {
    const overloaded = providerError(529, 'overloaded_error', 'Overloaded');
    const long = { since: NOW - 3_600_000, outageMs: 0 };
    const out = decide(overloaded, { retrying: long, healthy: false });
    expect(out).toMatchObject({ action: 'back-off', delayMs: 0, retrying: long });
    // A trial's failure starts a clock too (its outage total is what it read).
    expect(decide(overloaded, { healthy: false, outageMs: 500 })).toMatchObject({
      retrying: { since: NOW, outageMs: 500 },
    });
  });

  it.each([
    ['a 409', providerError(409, 'conflict_error', 'Conflict')],
    ['an invalid_request_error event mid-stream', midStream('invalid_request_error', 'Bad')],
    ['an error of its own', new TypeError('cannot read the request')],
  ])('spends an attempt on %s, which is not transient', (_, err) => {
    expect(classifyProviderError(err).transient).toBeFalsy();
    const third = decide(err, { history: tried(2) });
    expect(third).toMatchObject({ action: 'back-off', delayMs: 2_000 });
    expect(third.history.at(-1)).toMatchObject({ outcome: 'retryable', counted: true });
    const last = decide(err, { history: tried(4) });
    expect(last.action).toBe('dead-letter');
    if (last.action !== 'dead-letter') return;
    expect(last.cause.reason).toMatch(/^gave up after 5 attempts: /);
    expect(last.history).toHaveLength(5);
  });

  it.each(transient)(
    'with retryFor 0, spends attempts on %s: backs off, then dead-letters on the last',
    (_, err) => {
      const third = decide(err, { history: tried(2), retryForMs: 0 });
      expect(third).toMatchObject({ action: 'back-off', delayMs: 2_000 });
      expect(third.history.at(-1)).toMatchObject({ outcome: 'retryable', counted: true });
      const late = decide(err, {
        history: tried(20),
        attemptsAllowed: 30,
        retryForMs: 0,
        random: () => 0.999,
      });
      expect(late).toMatchObject({ action: 'back-off', delayMs: 59_940 });
      const last = decide(err, { history: tried(4), retryForMs: 0 });
      expect(last.action).toBe('dead-letter');
      if (last.action !== 'dead-letter') return;
      expect(last.cause.reason).toMatch(/^gave up after 5 attempts: /);
      expect(last.history).toHaveLength(5);
    },
  );

  it('spends no attempt while the breaker is open (or on its trial), and retries at once', () => {
    const conflict = providerError(409, 'conflict_error', 'Conflict');
    // Four attempts spent and many failures during an outage: still not dead-lettered.
    const history = [...tried(4), ...tried(10, false)];
    const out = decide(conflict, { history, healthy: false });
    expect(out).toMatchObject({ action: 'back-off', delayMs: 0 });
    expect(out.history.at(-1)).toMatchObject({ outcome: 'retryable', counted: false });
    // The same failure while the provider looked healthy is the fifth attempt.
    expect(decide(conflict, { history }).action).toBe('dead-letter');
  });

  it('keeps at most 100 records: the first try, then the latest', () => {
    const overloaded = providerError(529, 'overloaded_error', 'Overloaded');
    const history = Array.from({ length: 100 }, (_, i) => ({
      at: i,
      outcome: 'retryable' as const,
      counted: false,
      transient: true as const,
    }));
    const out = decide(overloaded, { history, retrying: { since: NOW - 1_000, outageMs: 0 } });
    expect(out.history).toHaveLength(MAX_HISTORY);
    expect(out.history.map((a) => a.at).slice(0, 3)).toEqual([0, 2, 3]);
    expect(out.history.at(-1)).toMatchObject({ at: 1_000, transient: true });
  });

  it('leaves the history it was given as it was', () => {
    const history = tried(1);
    decide(rateLimited(), { history });
    decide(providerError(500, 'api_error', 'boom'), { history });
    expect(history).toHaveLength(1);
  });

  it.each([...transient, ['a 429 with retry-after', rateLimited()] as [string, unknown]])(
    'in a pool, moves %s to another deployment at once, no attempt or retryFor spent',
    (_, err) => {
      // Four attempts spent, a clock running, retryFor used up: a move spends none of them.
      const history = tried(4);
      const clock = { since: NOW - TEN_MINUTES, outageMs: 0 };
      const out = decide(err, { history, retrying: clock, elsewhere: true, deployment: 'a' });
      expect(out.action).toBe('move');
      expect(out).not.toHaveProperty('retrying');
      expect(out.history).toHaveLength(5);
      expect(out.history.at(-1)).toMatchObject({ deployment: 'a', counted: false });
    },
  );

  it.each([
    ['a 401', providerError(401, 'authentication_error', 'invalid x-api-key')],
    ['a 403', providerError(403, 'permission_error', 'Your key lacks permission')],
    [
      "its key's spend limit",
      providerError(429, 'rate_limit_error', 'You have reached your specified API usage limits.'),
    ],
  ])(
    'in a pool, moves %s (the key is refused) and dead-letters it with no other deployment',
    (_, err) => {
      const out = decide(err, { elsewhere: true, deployment: 'a' });
      expect(out.action).toBe('move');
      expect(out.history.at(-1)).toMatchObject({
        deployment: 'a',
        outcome: 'final',
        counted: false,
      });
      expect(decide(err).action).toBe('dead-letter');
    },
  );

  it('in a pool, still counts a 429 moved elsewhere, and dead-letters past the bound', () => {
    expect(decide(rateLimited(), { rateLimitReturns: 3, elsewhere: true })).toMatchObject({
      action: 'move',
      returns: 4,
    });
    expect(decide(rateLimited(), { rateLimitReturns: 20, elsewhere: true }).action).toBe(
      'dead-letter',
    );
  });

  it.each([
    ['a 400', providerError(400, 'invalid_request_error', 'Bad request'), 'dead-letter'],
    ['a 409', providerError(409, 'api_error', 'Conflict'), 'back-off'],
    ['an unexpected error', new Error('boom'), 'back-off'],
  ])("in a pool, does not move %s: it is the job's, not the deployment's", (_, err, action) => {
    expect(decide(err, { elsewhere: true }).action).toBe(action);
  });
});
