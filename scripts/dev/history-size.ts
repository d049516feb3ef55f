/**
 * Measures what one queue's usage history takes in Redis (MEMORY USAGE of its keys) after a
 * steady day of 2 tenants and 2 models, 20 calls every 10 s, every bucket of every range
 * written (the clock is injected: it runs in seconds). docs/dashboard.md states the figure;
 * test/dashboard-history.test.ts checks the worst case. Needs Redis (REDIS_URL):
 * `node --import tsx scripts/dev/history-size.ts`.
 */
import { Redis } from 'ioredis';
import { addCall, HISTORY_TIERS, newBatch, writeHistory } from '../../shared/history.ts';
import { historyMemoryBytes } from '../../shared/history-reader.ts';
import { deleteKeysMatching } from '../../shared/redis.ts';

const redis = new Redis(process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379');
const names = { prefix: `llmq-history-size-${process.pid}`, queue: 'jobs' };
const now = Date.UTC(2026, 0, 5, 12);
let seed = 1;
const random = () => {
  seed = (seed * 16_807) % 2_147_483_647;
  return seed / 2_147_483_647;
};

/** `n` buckets of `step` ms up to `now`, each with 5 calls per tenant and model. */
async function fill(step: number, n: number): Promise<void> {
  for (let b = n - 1; b >= 0; b--) {
    const at = now - b * step;
    const batch = newBatch();
    for (const tenant of ['acme', 'globex'])
      for (const model of ['claude-sonnet-4-6', 'claude-haiku-4-5'])
        for (let i = 0; i < 5; i++) {
          addCall(
            batch,
            {
              jobId: `job-${b}-${tenant}-${model}-${i}`,
              model,
              tenant,
              ok: random() > 0.02,
              waitMs: 50 * 400 ** random(),
              callMs: 400 * 7 ** random(),
              inputTokens: 2_000,
              outputTokens: 300,
              costMicros: 9_000,
              reservedInputTokens: 2_200,
              reservedOutputTokens: 1_000,
              gate: { budget: 500 * random(), paused: 0, concurrency: 0, queued: 10 },
            },
            at,
          );
        }
    Object.assign(batch.series['*']!, { r: 1 });
    await writeHistory(redis, names, batch, at);
  }
}

try {
  for (const t of [...HISTORY_TIERS].reverse()) await fill(t.bucketMs, t.slots);
  const bytes = await historyMemoryBytes(redis, names);
  console.log(`one queue's history after a steady day, 2 tenants x 2 models: ${bytes} bytes`);
} finally {
  await deleteKeysMatching(redis, `${names.prefix}:*`);
  redis.disconnect();
}
