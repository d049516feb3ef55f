import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import type { QueueNames } from '../shared/keys.ts';
import { FairShare } from '../worker/fair-share.ts';
import type { HeadJob } from '../worker/head-job.ts';
import { eachTestRedis } from './helpers.ts';

let redis: Redis;
let names: QueueNames;
eachTestRedis('fairorder', (r, n) => {
  redis = r;
  names = n;
});

const job = (id: string, tenant: string, tokens = 100, priority = 100): HeadJob => ({
  id,
  cost: { requests: 1, inputTokens: tokens / 2, outputTokens: tokens / 2 },
  model: 'claude-test-1',
  counted: false,
  priority,
  scopes: [`tenant:${tenant}`],
  tenant,
});

/** a's backlog first in the queue, b's behind it, as the gate's peek gives them. */
const queue = [
  ...Array.from({ length: 8 }, (_, i) => job(`a${i}`, 'a')),
  ...Array.from({ length: 8 }, (_, i) => job(`b${i}`, 'b')),
];

describe("fair share's order for a round", () => {
  it('serves tenants of equal weight in turn, each tenant in its own order', async () => {
    const fair = new FairShare(redis, names, {});
    const round = await fair.order(queue, 6);
    expect(round.map((h) => h.id)).toEqual(['a0', 'b0', 'a1', 'b1', 'a2', 'b2']);
  });

  it('gives a tenant of weight 3 three turns to one, and carries on from what was charged', async () => {
    const fair = new FairShare(redis, names, { weights: { b: 3 } });
    const first = await fair.order(queue, 8);
    expect(first.map((h) => h.id)).toEqual(['a0', 'b0', 'b1', 'b2', 'a1', 'b3', 'b4', 'b5']);
    // Only the first four were admitted: the next round starts from what they were charged.
    await fair.charge(first.slice(0, 4));
    const rest = queue.filter((h) => !first.slice(0, 4).includes(h));
    const next = await fair.order(rest, 4);
    expect(next.map((h) => h.id)).toEqual(['a1', 'b3', 'b4', 'b5']);
  });

  it('takes only the first priority class, and a lone tenant its jobs in order', async () => {
    const fair = new FairShare(redis, names, {});
    const mixed = [job('a0', 'a'), job('a1', 'a'), job('b0', 'b', 100, 200)];
    expect((await fair.order(mixed, 3)).map((h) => h.id)).toEqual(['a0', 'a1']);
    expect((await fair.order(mixed, 1)).map((h) => h.id)).toEqual(['a0']);
  });
});
