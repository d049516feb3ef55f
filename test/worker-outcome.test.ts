import { APIConnectionError, APIConnectionTimeoutError, APIError } from '@anthropic-ai/sdk';
import { describe, expect, it } from 'vitest';
import type { AttemptRecord } from '../shared/job.ts';
import { classifyProviderError } from '../worker/classify.ts';
import { decideOutcome, type OutcomeInput } from '../worker/outcome.ts';

/** An SDK error as the provider's answer would raise it. */
function providerError(status: number, type: string, message: string, headers = {}) {
  return APIError.generate(
    status,
    { type: 'error', error: { type, message } },
    message,
    new Headers(headers),
  );
}

const tried = (n: number, counted = true): AttemptRecord[] =>
  Array.from({ length: n }, (_, i) => ({ at: i, outcome: 'retryable', counted }));

/** The policy for `err` with a job that has `history` behind it and 5 attempts. */
function decide(err: unknown, more: Partial<OutcomeInput> = {}) {
  return decideOutcome({
    failure: classifyProviderError(err),
    history: [],
    rateLimitReturns: 0,
    attemptsAllowed: 5,
    maxRateLimitReturns: 20,
    spendsAttempt: true,
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

  it.each([
    ['a 529', providerError(529, 'overloaded_error', 'Overloaded')],
    ['a 500', providerError(500, 'api_error', 'Internal server error')],
    ['a timeout', new APIConnectionTimeoutError()],
    ['a dropped connection', new APIConnectionError({ message: 'socket hang up' })],
  ])('backs off after %s with full jitter, then dead-letters on the last attempt', (_, err) => {
    // The third attempt: the wait is drawn from [0, 1 s · 2²); random() = 0.5 gives its middle.
    const third = decide(err, { history: tried(2) });
    expect(third).toMatchObject({ action: 'back-off', delayMs: 2_000 });
    expect(third.history.at(-1)).toMatchObject({ outcome: 'retryable', counted: true });
    expect(decide(err, { history: tried(2), random: () => 0 })).toMatchObject({ delayMs: 0 });
    // The cap bounds the wait however many attempts went before.
    const late = decide(err, { history: tried(20), attemptsAllowed: 30, random: () => 0.999 });
    expect(late).toMatchObject({ action: 'back-off', delayMs: 59_940 });

    const last = decide(err, { history: tried(4) });
    expect(last.action).toBe('dead-letter');
    if (last.action !== 'dead-letter') return;
    expect(last.cause.reason).toMatch(/^gave up after 5 attempts: /);
    expect(last.history).toHaveLength(5);
  });

  it('spends no attempt while the breaker is open (or on its trial), and retries at once', () => {
    const overloaded = providerError(529, 'overloaded_error', 'Overloaded');
    // Four attempts spent and many failures during an outage: still not dead-lettered.
    const history = [...tried(4), ...tried(10, false)];
    const out = decide(overloaded, { history, spendsAttempt: false });
    expect(out).toMatchObject({ action: 'back-off', delayMs: 0 });
    expect(out.history.at(-1)).toMatchObject({ outcome: 'retryable', counted: false });
    // The same failure while the provider looked healthy is the fifth attempt.
    expect(decide(overloaded, { history }).action).toBe('dead-letter');
  });

  it('leaves the history it was given as it was', () => {
    const history = tried(1);
    decide(rateLimited(), { history });
    decide(providerError(500, 'api_error', 'boom'), { history });
    expect(history).toHaveLength(1);
  });
});
