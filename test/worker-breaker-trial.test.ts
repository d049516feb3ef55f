import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import type { QueueNames } from '../shared/keys.ts';
import { CircuitBreaker } from '../worker/breaker.ts';
import { eachTestRedis, until } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
eachTestRedis('trial', (r, n) => {
  redis = r;
  names = n;
});

describe('the breaker’s trial call', () => {
  it('goes to one process at a time, and to another at once when its holder stops', async () => {
    const options = { threshold: 1, cooldownMs: 50, trialTtlMs: 60_000, cacheMs: 0 };
    const a = new CircuitBreaker(redis, names, options);
    const b = new CircuitBreaker(redis, names, options);
    expect(await a.failure()).toBe(true);
    await new Promise((r) => setTimeout(r, 80));
    expect(await a.check()).toEqual({ allowed: true, trial: true });
    // While a holds the trial, b may not call.
    expect(await b.check()).toMatchObject({ allowed: false });
    await a.abandonTrial();
    expect(await b.check()).toEqual({ allowed: true, trial: true });
    // A holder that is not the trial's gives nothing up.
    await a.abandonTrial();
    expect(await b.check()).toEqual({ allowed: true, trial: true });
    await b.success();
    expect((await b.state()).state).toBe('closed');
  });
});

describe('the breaker’s outage clock', () => {
  it('counts the time it was not closed, the current outage too, and keeps the total', async () => {
    const b = new CircuitBreaker(redis, names, { threshold: 1, cooldownMs: 100, cacheMs: 0 });
    const first = await b.recordFailure();
    expect(first).toMatchObject({ opened: true, whileClosed: false, outageMs: 0 });
    await until(async () => (await b.check()).allowed);
    // A failed trial opens it again: the same outage goes on.
    const trial = await b.recordFailure();
    expect(trial.opened).toBe(true);
    expect(trial.outageMs).toBe(trial.now - first.now);
    expect(trial.outageMs).toBeGreaterThanOrEqual(100);
    await until(async () => (await b.check()).allowed);
    await b.success();
    const closed = await b.state();
    expect(closed.state).toBe('closed');
    expect(closed.outageMs).toBeGreaterThanOrEqual(200);
    // The next outage starts from that total.
    expect((await b.recordFailure()).outageMs).toBe(closed.outageMs);
  });
});

describe('a worker whose trial call waits for budget', () => {
  it('sends it alone: the jobs behind it wait until the breaker has closed', async () => {
    const { Producer } = await import('../producer/producer.ts');
    const { Limiter } = await import('../shared/limiter/limiter.ts');
    const { startWorker } = await import('../worker/worker.ts');
    const limits = { tokens: 1_000 };
    const limiter = { windowMs: 1_500, limits, headroom: 0 };
    // 880 of 1,000 spent elsewhere: the head (about 160) waits for it to leave the window.
    const spent = new Limiter({ redis, names, ...limiter });
    await spent
      .call(await spent.acquire({ requests: 1, inputTokens: 880, outputTokens: 0 }))
      .begin();
    const producer = new Producer({ redis, names });
    const request = { model: 'm', max_tokens: 150, messages: [{ role: 'user', content: 'hi' }] };
    for (let i = 0; i < 4; i++) await producer.enqueue(request, { priority: 'batch' });
    await producer.close();
    const breaker = { threshold: 1, cooldownMs: 50, cacheMs: 0 };
    const watcher = new CircuitBreaker(redis, names, breaker);
    await watcher.failure();
    await new Promise((r) => setTimeout(r, 80));

    let inFlight = 0;
    const starts: { state: string; alongside: number }[] = [];
    const worker = await startWorker({
      redis: redis.duplicate(),
      names,
      concurrency: 4,
      limiter,
      breaker,
      provider: async (_req, o) => {
        inFlight++;
        starts.push({ state: (await watcher.state()).state, alongside: inFlight - 1 });
        await o.onStart?.(new Headers());
        await new Promise((r) => setTimeout(r, 200));
        inFlight--;
        return {
          message: {
            id: 'msg',
            model: 'm',
            role: 'assistant',
            content: [],
            stop_reason: 'end_turn',
            stop_sequence: null,
            usage: {
              input_tokens: 5,
              output_tokens: 5,
              cache_creation_input_tokens: null,
              cache_read_input_tokens: null,
            },
          },
          headers: new Headers(),
          requestId: null,
          latencyMs: 200,
        };
      },
    });
    try {
      const deadline = Date.now() + 10_000;
      while (starts.length < 4 && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 50));
    } finally {
      await worker.stop(1_000);
    }
    expect(starts).toHaveLength(4);
    // One call went while the breaker was half open, and it went alone.
    expect(starts.filter((s) => s.state === 'half_open')).toEqual([
      { state: 'half_open', alongside: 0 },
    ]);
    expect(starts[0]!.state).toBe('half_open');
  });
});
