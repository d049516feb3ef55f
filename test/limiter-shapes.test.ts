import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import type { QueueNames } from '../shared/keys.ts';
import type { CallHandle } from '../shared/limiter/call.ts';
import {
  type Algorithm,
  createRateLimiter,
  type RateLimiter,
} from '../testing/mock-anthropic/rate-limits.ts';
import { eachTestRedis, rateHeaders, testLimiter } from './helpers.ts';

/*
 * The limiter against the two shapes a provider's limit takes, the mock's exact sliding window
 * and its token bucket (capacity = the limit, refilled continuously), on an injected clock: the
 * published workload (60 calls of 207 tokens, 4,000 per 10 s, 10 at once, 250 ms each), the
 * provider's readings rounded to 1/40 of the limit as the API's are. Every call llmq admits the
 * provider admits too, and llmq's admissions span no more than a little over the shape's own
 * minimum: it admits what the provider would, and no more.
 */

let redis: Redis;
let names: QueueNames;
eachTestRedis('shapes', (r, n) => {
  redis = r;
  names = n;
});

const W = 10_000;
const LIMIT = 4_000;
const CALL = { requests: 1, inputTokens: 7, outputTokens: 200 };
const CHARGE = { requests: 1, input_tokens: 7, output_tokens: 200, tokens: 207 };
const CALLS = 60;
const LATENCY = 250;
const ROUND = LIMIT / 40;

/** The provider's tokens reading as its headers give it: remaining rounded, reset in seconds. */
function reading(provider: RateLimiter, now: number): Record<string, string> {
  const s = provider.state(now).tokens!;
  const remaining = Math.round(s.remaining / ROUND) * ROUND;
  return rateHeaders('tokens', s.limit, remaining, s.resetAt - now, now);
}

/** Runs the workload; resolves with the admissions' span and the calls the provider refused. */
async function run(shape: Algorithm): Promise<{ spanMs: number; refused: number }> {
  const provider = createRateLimiter(shape, { tokens: LIMIT }, W);
  let t = 1_800_000_000_000;
  const lim = testLimiter({
    redis,
    names,
    clock: () => t,
    windowMs: W,
    headroom: 0.01,
    concurrency: 10,
    limits: { tokens: LIMIT },
  });
  const inFlight: { endsAt: number; call: CallHandle }[] = [];
  const admittedAt: number[] = [];
  let refused = 0;
  while (admittedAt.length < CALLS || inFlight.length > 0) {
    inFlight.sort((a, b) => a.endsAt - b.endsAt);
    while (inFlight[0] && inFlight[0].endsAt <= t) {
      await inFlight.shift()!.call.succeeded({ inputTokens: 7, outputTokens: 200 });
    }
    let waitMs = Number.POSITIVE_INFINITY;
    if (admittedAt.length < CALLS) {
      const d = await lim.tryAcquire(CALL);
      if (d.ok) {
        const call = lim.call(d.reservation);
        if (!provider.consume(CHARGE, t).admitted) {
          refused++;
          await call.failed({ charged: false });
          waitMs = 1_000;
        } else {
          admittedAt.push(t);
          await call.begin(reading(provider, t));
          inFlight.push({ endsAt: t + LATENCY, call });
          continue;
        }
      } else waitMs = d.waitMs;
    }
    const nextEnd = inFlight[0] ? inFlight[0].endsAt - t : Number.POSITIVE_INFINITY;
    t += Math.max(1, Math.min(waitMs, nextEnd));
  }
  await lim.destroy();
  return { spanMs: admittedAt.at(-1)! - admittedAt[0]!, refused };
}

describe('the limiter against a provider of each shape', () => {
  it('a sliding window: nothing refused, admissions within 2% of its minimum', async () => {
    const { spanMs, refused } = await run('sliding');
    expect(refused).toBe(0);
    // 19 calls fit a window: four waves, the last a window after the third.
    const minimum = 3 * W;
    expect(spanMs).toBeGreaterThanOrEqual(minimum);
    expect(spanMs).toBeLessThanOrEqual(1.02 * minimum);
  });

  it('a token bucket: nothing refused, admissions within 5% of its minimum', async () => {
    const { spanMs, refused } = await run('bucket');
    expect(refused).toBe(0);
    // A full bucket, then what it refills: (everything charged − capacity) / refill rate.
    const minimum = (CALLS * 207 - LIMIT) / (LIMIT / W);
    expect(spanMs).toBeGreaterThanOrEqual(minimum);
    expect(spanMs).toBeLessThanOrEqual(1.05 * minimum);
  });
});
