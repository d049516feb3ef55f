import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { Producer } from '../producer/producer.ts';
import { formatStatus } from '../scripts/cli/status.ts';
import type { QueueNames } from '../shared/keys.ts';
import { Limiter } from '../shared/limiter/limiter.ts';
import { getQueueStatus } from '../shared/status.ts';
import { type FakeAnswer, startFakeWorker } from './fixtures/fake-worker.ts';
import { eachTestRedis, rateHeaders, start, until } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
eachTestRedis('status', (r, n) => {
  redis = r;
  names = n;
});

describe('llmq status', () => {
  it("shows the provider's limit, its room now and its shape once a reading came", async () => {
    const limiter = new Limiter({ redis, names, limits: { tokens: 4_000 }, headroom: 0 });
    const before = formatStatus(await getQueueStatus(redis, names, limiter));
    expect(before).toContain('pause none  breaker closed');
    expect(before).not.toContain('provider');
    const r = await limiter.acquire({ requests: 1, inputTokens: 100, outputTokens: 100 });
    // A bucket's reading: 200 of 4,000 used, full again in 0.5 s of its 60 s window.
    await start(limiter, r, rateHeaders('tokens', 4_000, 3_800, 500));
    const status = formatStatus(await getQueueStatus(redis, names, limiter));
    expect(status).toMatch(
      /global \[bucket\]: .*tokens \(in \+ out\) 200\/4000 3\d{3} free \(provider: limit 4000, room 3\d{3} now\)/,
    );
    // Beside the configured limits (none stored here), the ones read from the headers.
    expect(status).toContain('limits configured: none stored');
    expect(status).toContain('limits read: global tpm 4000');
  });

  it('counts a dead-lettered job once, under dead, not under failed too', async () => {
    const producer = new Producer({ redis, names });
    const worker = startFakeWorker(
      redis,
      names,
      (prompt): FakeAnswer =>
        prompt === 'ok'
          ? { text: 'fine', usage: { input_tokens: 3, output_tokens: 1 } }
          : {
              deadLetter: {
                reason: '429 without retry-after: spend cap reached',
                errorClass: 'RateLimitError',
                status: 429,
              },
            },
    );
    try {
      const ask = (content: string) => ({
        model: 'claude-test',
        max_tokens: 10,
        messages: [{ role: 'user', content }],
      });
      for (const p of ['capped', 'capped', 'capped', 'ok']) await producer.enqueue(ask(p));
      await until(async () => {
        const c = await producer.queue.getJobCounts('failed', 'completed');
        return c['failed'] === 3 && c['completed'] === 1;
      });
      const status = await getQueueStatus(redis, names);
      expect(status.counts).toMatchObject({ completed: 1, failed: 0, dead: 3 });
      expect(formatStatus(status)).toContain('completed 1  failed 0  dead 3');
      // A purged dead letter leaves its job failed: counted there, still once.
      const dead = await producer.deadLetters.getJobs(['wait']);
      await dead[0]!.remove();
      expect((await getQueueStatus(redis, names)).counts).toMatchObject({ failed: 1, dead: 2 });
    } finally {
      await worker.close();
      await producer.close();
    }
  });
});
