import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { formatStatus } from '../scripts/cli/status.ts';
import type { QueueNames } from '../shared/keys.ts';
import { Limiter } from '../shared/limiter/limiter.ts';
import { getQueueStatus } from '../shared/status.ts';
import { eachTestRedis, sendProbe } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
eachTestRedis('status', (r, n) => {
  redis = r;
  names = n;
});

describe('llmq status', () => {
  it('says when a probe is out, and until when the others wait for it', async () => {
    const limiter = new Limiter({ redis, names, limits: { tokens: 4_000 }, headroom: 0 });
    const before = formatStatus(await getQueueStatus(redis, names, limiter));
    expect(before).toContain('pause none  breaker closed');
    await sendProbe(limiter);
    const status = await getQueueStatus(redis, names, limiter);
    expect(status.limiter.probeUntil).not.toBeNull();
    expect(formatStatus(status)).toContain(
      `pause none  probe out until ${new Date(status.limiter.probeUntil!).toISOString()}  breaker closed`,
    );
  });
});
