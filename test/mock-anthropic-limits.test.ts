import Anthropic, { RateLimitError } from '@anthropic-ai/sdk';
import { describe, expect, it } from 'vitest';
import { countMockTokens, type MockAnthropicHandle } from '../testing/mock-anthropic/index.ts';
import {
  type Charge,
  createSlidingWindowLimiter,
  createTokenBucketLimiter,
} from '../testing/mock-anthropic/rate-limits.ts';
import { worstWindow } from '../testing/mock-anthropic/stats.ts';
import { eachTestMocks } from './fixtures/mock-servers.ts';

const start = eachTestMocks();

function sdk(mock: MockAnthropicHandle, maxRetries = 0): Anthropic {
  return new Anthropic({ apiKey: 'test-key', baseURL: mock.url, maxRetries });
}

function request(maxTokens: number) {
  return {
    model: 'claude-mock-1',
    max_tokens: maxTokens,
    messages: [
      { role: 'user' as const, content: 'Write a limerick about a queue of patient jobs.' },
    ],
  };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const INPUT = countMockTokens(request(1));
const RFC3339_SECONDS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/;

describe('mock Anthropic rate limits, as the SDK sees them', () => {
  // Each case: limits that admit exactly three requests of `maxTokens`, and what one costs.
  it.each([
    { kind: 'requests', header: 'requests', maxTokens: 10, limit: 3, cost: 1, unit: 'requests' },
    {
      kind: 'input_tokens',
      header: 'input-tokens',
      maxTokens: 10,
      limit: 3 * INPUT + Math.floor(INPUT / 2),
      cost: INPUT,
      unit: 'input tokens',
    },
    {
      kind: 'output_tokens',
      header: 'output-tokens',
      maxTokens: 300,
      limit: 1000,
      cost: 300,
      unit: 'output tokens',
    },
    {
      kind: 'tokens',
      header: 'tokens',
      maxTokens: 200,
      limit: 3 * (INPUT + 200) + 10,
      cost: INPUT + 200,
      unit: 'tokens',
    },
  ] as const)('a $kind limit answers 429 with retry-after and headers once exceeded', async (c) => {
    const limits = {
      requests: { requests: c.limit },
      input_tokens: { inputTokens: c.limit },
      output_tokens: { outputTokens: c.limit },
      tokens: { tokens: c.limit },
    }[c.kind];
    const mock = await start({ limits });
    const client = sdk(mock);
    const prefix = `anthropic-ratelimit-${c.header}`;

    for (let i = 1; i <= 3; i++) {
      const { response } = await client.messages.create(request(c.maxTokens)).withResponse();
      expect(response.headers.get(`${prefix}-limit`)).toBe(String(c.limit));
      expect(response.headers.get(`${prefix}-remaining`)).toBe(String(c.limit - i * c.cost));
      expect(response.headers.get(`${prefix}-reset`)).toMatch(RFC3339_SECONDS);
    }
    const refused = await client.messages
      .create(request(c.maxTokens))
      .catch((caught: unknown) => caught);
    expect(refused).toBeInstanceOf(RateLimitError);
    const error = refused as RateLimitError;
    const retryAfter = Number(error.headers.get('retry-after'));
    // The first admission leaves the one-minute window a minute after it was made.
    expect(retryAfter).toBeGreaterThanOrEqual(59);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(error.headers.get(`${prefix}-remaining`)).toBe(String(c.limit - 3 * c.cost));
    const reset = Date.parse(error.headers.get(`${prefix}-reset`) ?? '');
    expect(reset - Date.now()).toBeGreaterThan(58_000);
    expect(reset - Date.now()).toBeLessThanOrEqual(61_000);
    expect(error.type).toBe('rate_limit_error');
    expect(error.apiMessage).toContain(
      `of ${c.limit.toLocaleString('en-US')} ${c.unit} per minute`,
    );

    const stats = mock.stats();
    expect(stats.rateLimited[c.kind]).toBe(1);
    expect(stats).toMatchObject({ attempts: 4, admitted: 3, responses: { '200': 3, '429': 1 } });
    expect(stats.worstWindow[c.kind]).toBe(3 * c.cost);
    expect(stats.worstWindow[c.kind]).toBeLessThanOrEqual(c.limit);
  });

  it('never puts more than the limit in any window under a concurrent burst (sliding)', async () => {
    const mock = await start({
      limits: { outputTokens: 1000, tokens: 1000 + 7 * INPUT, requests: 50 },
    });
    const client = sdk(mock);
    const results = await Promise.allSettled(
      Array.from({ length: 40 }, () => client.messages.create(request(100))),
    );
    const admitted = results.filter((result) => result.status === 'fulfilled').length;
    const stats = mock.stats();
    // 10 would fit the output limit; the total-tokens limit (input + output) binds first.
    expect(admitted).toBe(Math.floor((1000 + 7 * INPUT) / (100 + INPUT)));
    expect(stats.admitted).toBe(admitted);
    expect(stats.worstWindow.output_tokens).toBeLessThanOrEqual(1000);
    expect(stats.worstWindow.tokens).toBeLessThanOrEqual(1000 + 7 * INPUT);
    expect(stats.rateLimited.tokens).toBe(40 - admitted);
  });

  it('frees a sliding window exactly when the oldest admission leaves it', async () => {
    const mock = await start({ windowMs: 1000, limits: { requests: 2 } });
    const client = sdk(mock);
    await client.messages.create(request(10));
    await client.messages.create(request(10));
    const refused = await client.messages.create(request(10)).catch((caught: unknown) => caught);
    expect((refused as RateLimitError).headers.get('retry-after')).toBe('1');
    expect((refused as RateLimitError).apiMessage).toContain('of 2 requests per second');

    const first = mock.stats().firstAdmissionAt ?? 0;
    await sleep(first + 1000 - Date.now() + 20);
    await expect(client.messages.create(request(10))).resolves.toMatchObject({ type: 'message' });
    expect(mock.stats().worstWindow.requests).toBeLessThanOrEqual(2);
  });

  it('refills a token bucket continuously, where a sliding window still refuses', async () => {
    // A 3 s window refills a third of a token a millisecond: slow enough that a loaded machine's
    // delays do not blur the figures below.
    const bucket = await start({
      windowMs: 3000,
      algorithm: 'bucket',
      limits: { outputTokens: 1000 },
    });
    const sliding = await start({ windowMs: 3000, limits: { outputTokens: 1000 } });
    let bucketFullFrom = 0;
    for (const mock of [bucket, sliding]) {
      if (mock === bucket) bucketFullFrom = Date.now();
      await sdk(mock).messages.create(request(500));
      await sdk(mock).messages.create(request(500));
      const refused = await sdk(mock)
        .messages.create(request(500))
        .catch((caught: unknown) => caught);
      expect(refused).toBeInstanceOf(RateLimitError);
      expect(Number((refused as RateLimitError).headers.get('retry-after'))).toBeGreaterThanOrEqual(
        1,
      );
    }
    const emptiedAt = Date.now();

    await sleep(300);
    // A request too big to fit shows what has flowed back in, and is not charged.
    const probe = await sdk(bucket)
      .messages.create(request(900))
      .catch((caught: unknown) => caught);
    // It has refilled since its first call at the most.
    const refilledAtMost = Date.now() - bucketFullFrom;
    const remaining = Number(
      (probe as RateLimitError).headers.get('anthropic-ratelimit-output-tokens-remaining'),
    );
    expect(remaining).toBeGreaterThanOrEqual(100);
    expect(remaining).toBeLessThanOrEqual(Math.ceil(refilledAtMost / 3));

    await sleep(emptiedAt + 1800 - Date.now());
    await expect(sdk(bucket).messages.create(request(500))).resolves.toMatchObject({
      type: 'message',
    });
    await expect(sdk(sliding).messages.create(request(500))).rejects.toBeInstanceOf(RateLimitError);
  });

  it("admits more with 'actual' output accounting than with 'reserve' for the same calls", async () => {
    const options = { limits: { outputTokens: 1000 }, outputShare: 0.25 } as const;
    const reserve = await start({ ...options, outputAccounting: 'reserve' });
    const actual = await start({ ...options, outputAccounting: 'actual' });
    const outcomes: Record<string, number> = {};
    for (const mock of [reserve, actual]) {
      const client = sdk(mock);
      let ok = 0;
      for (let i = 0; i < 7; i++) {
        // Half streamed: the unused output comes back when the stream ends, too.
        const call =
          i % 2 === 0
            ? client.messages.create(request(400))
            : client.messages.stream(request(400)).finalMessage();
        ok += await call.then(
          () => 1,
          () => 0,
        );
      }
      outcomes[mock.stats().outputAccounting] = ok;
    }
    // reserve: 400 + 400 fill the 1000; actual: each call keeps only its 100, so 6 × 100 + 400 fit.
    expect(outcomes).toEqual({ reserve: 2, actual: 7 });
    expect(reserve.stats().spent.output_tokens).toBe(800);
    expect(actual.stats().spent.output_tokens).toBe(7 * 100);
    expect(actual.stats().worstWindow.output_tokens).toBeLessThanOrEqual(1000);
  });

  it("charges output as it is produced with 'produced' accounting: none at admission, yet a spent output budget refuses", async () => {
    const mock = await start({
      limits: { outputTokens: 1000 },
      outputShare: 0.25,
      outputAccounting: 'produced',
      latencyPerOutputTokenMs: 1,
    });
    const client = sdk(mock);
    // max_tokens above the limit: not charged at admission, so admitted; it writes 500 tokens.
    const first = await client.messages.create(request(2000)).withResponse();
    expect(first.response.headers.get('anthropic-ratelimit-output-tokens-remaining')).toBe('1000');
    expect(first.data.usage.output_tokens).toBe(500);
    expect(mock.stats().spent.output_tokens).toBe(500);
    // A stream is charged as its tokens go out: partly while it runs, all of it at the end.
    const stream = client.messages.stream(request(2000));
    let deltas = 0;
    let midway = 0;
    stream.on('text', () => {
      deltas++;
      if (deltas === 8) midway = mock.stats().spent.output_tokens;
    });
    const second = await stream.finalMessage();
    expect(second.usage.output_tokens).toBe(500);
    expect(midway).toBeGreaterThan(500);
    expect(midway).toBeLessThan(1000);
    expect(mock.stats().spent.output_tokens).toBe(1000);
    // The output budget is spent: the next call is refused, whatever its max_tokens.
    const refused = await client.messages.create(request(1)).catch((caught: unknown) => caught);
    expect(refused).toBeInstanceOf(RateLimitError);
    expect(mock.stats().rateLimited.output_tokens).toBe(1);
    expect(mock.stats().outputAccounting).toBe('produced');
  });

  it('tells the SDK not to retry a request that can never fit', async () => {
    const mock = await start({ limits: { outputTokens: 1000 } });
    const refused = await sdk(mock, 2)
      .messages.create(request(2000))
      .catch((caught: unknown) => caught);
    expect(refused).toBeInstanceOf(RateLimitError);
    expect((refused as RateLimitError).headers.get('x-should-retry')).toBe('false');
    expect((refused as RateLimitError).apiMessage).toContain('can never be admitted');
    expect(mock.stats().attempts).toBe(1);
  });
});

describe('rate limiters, with an injected clock', () => {
  const cost = (output: number, requests = 1): Charge => ({
    requests,
    input_tokens: 0,
    output_tokens: output,
    tokens: output,
  });

  it('sliding: admits within (now - window, now], refuses until the oldest charge leaves', () => {
    const limiter = createSlidingWindowLimiter({ output_tokens: 100 }, 1000);
    expect(limiter.consume(cost(60), 0).admitted).toBe(true);
    expect(limiter.consume(cost(30), 400).admitted).toBe(true);
    expect(limiter.consume(cost(50), 500)).toEqual({
      admitted: false,
      dimension: 'output_tokens',
      retryAfterMs: 500,
      canEverFit: true,
    });
    // Refused requests are not charged.
    expect(limiter.state(500).output_tokens).toEqual({ limit: 100, remaining: 10, resetAt: 1400 });
    expect(limiter.consume(cost(50), 999).admitted).toBe(false);
    expect(limiter.consume(cost(50), 1000).admitted).toBe(true);
  });

  it('sliding: a refund lowers the logged charge and makes room at once', () => {
    const limiter = createSlidingWindowLimiter({ output_tokens: 100, tokens: 100 }, 1000);
    const admission = limiter.consume(cost(80), 0);
    if (!admission.admitted) throw new Error('expected an admission');
    expect(limiter.consume(cost(50), 10).admitted).toBe(false);
    limiter.refund(admission.ticket, { output_tokens: 60, tokens: 60 }, 20);
    expect(admission.ticket.charge.output_tokens).toBe(20);
    expect(limiter.consume(cost(50), 30).admitted).toBe(true);
    // A refund never gives back more than is charged.
    limiter.refund(admission.ticket, { output_tokens: 500 }, 40);
    expect(limiter.state(40).output_tokens?.remaining).toBe(50);
  });

  it('sliding and bucket: a cost above the limit can never fit', () => {
    for (const limiter of [
      createSlidingWindowLimiter({ output_tokens: 100 }, 1000),
      createTokenBucketLimiter({ output_tokens: 100 }, 1000),
    ]) {
      expect(limiter.consume(cost(101), 0)).toMatchObject({ admitted: false, canEverFit: false });
    }
  });

  it('sliding: of several refusing limits, reports the one that frees up last', () => {
    const limiter = createSlidingWindowLimiter({ requests: 2, output_tokens: 100 }, 1000);
    limiter.consume(cost(5), 0);
    limiter.consume(cost(90), 300);
    // Requests: room once the first leaves (at 1000); output: only once the second does (1300).
    expect(limiter.consume(cost(50), 500)).toMatchObject({
      admitted: false,
      dimension: 'output_tokens',
      retryAfterMs: 800,
    });
    expect(limiter.consume(cost(1), 600)).toMatchObject({
      admitted: false,
      dimension: 'requests',
      retryAfterMs: 400,
    });
  });

  it('bucket: refills at limit / window, continuously, and caps refunds at capacity', () => {
    const limiter = createTokenBucketLimiter({ output_tokens: 100 }, 1000);
    expect(limiter.consume(cost(100), 0).admitted).toBe(true);
    expect(limiter.consume(cost(10), 0)).toMatchObject({ admitted: false, retryAfterMs: 100 });
    expect(limiter.consume(cost(10), 50)).toMatchObject({ admitted: false, retryAfterMs: 50 });
    expect(limiter.consume(cost(10), 100).admitted).toBe(true);
    expect(limiter.state(600).output_tokens).toEqual({ limit: 100, remaining: 50, resetAt: 1100 });

    const admission = limiter.consume(cost(40), 600);
    if (!admission.admitted) throw new Error('expected an admission');
    limiter.refund(admission.ticket, { output_tokens: 40 }, 2000);
    expect(limiter.state(2000).output_tokens).toEqual({
      limit: 100,
      remaining: 100,
      resetAt: 2000,
    });
  });

  it('worstWindow: the largest charge in any [t, t + window), from unsorted records', () => {
    const at = (time: number, output: number) => ({ at: time, charge: cost(output) });
    const records = [at(1000, 30), at(0, 50), at(999, 40), at(2500, 10), at(1998, 25)];
    expect(worstWindow(records, 1000)).toEqual({
      requests: 3,
      input_tokens: 0,
      output_tokens: 95,
      tokens: 95,
    });
    expect(worstWindow([], 1000).output_tokens).toBe(0);
  });
});
