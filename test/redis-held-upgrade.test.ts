import { randomUUID } from 'node:crypto';
import { Worker } from 'bullmq';
import { describe, expect, it } from 'vitest';
import type { JobData, JobResult } from '../shared/job.ts';
import { bullPrefix } from '../shared/keys.ts';
import { requestDigest } from '../shared/request-digest.ts';
import { countMockTokens } from '../testing/mock-anthropic/index.ts';
import { deadLetterHeld } from '../worker/dead-letter-bounds.ts';
import { listDeadLetters } from '../worker/dead-letters.ts';
import {
  allCompleted,
  type Pool,
  poolsPerTest,
  request,
  runCli,
} from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

/*
 * Jobs, results and dead letters written by the version before requests were let go: a
 * completed job kept its whole request, a job had no digest, a dead-lettered job kept its
 * request beside its letter, and no bytes were counted. They still read, answer and retry.
 */

const openTestPool = poolsPerTest();

/** Writes a job's data as the previous version had it: no digest. */
async function withoutDigest(p: Pool, id: string, data?: JobData): Promise<JobData> {
  const job = (await p.job(id))!;
  const { digest: _digest, ...old } = data ?? job.data;
  await job.updateData(old as JobData);
  return old as JobData;
}

describe('what the previous version wrote', () => {
  it('a job it completed (whole request, no digest) still answers status, waitForResult and its idempotency key', async () => {
    const pool = await openTestPool('upgdone');
    const req = request('Written before the upgrade.', 20);
    const id = await pool.producer.enqueue(req, { idempotencyKey: 'old-1' });
    await withoutDigest(pool, id);
    // Completed by BullMQ's own completion, as the previous worker did: the request stays.
    const bull = new Worker<JobData, JobResult>(pool.names.queue, null, {
      connection: pool.redis,
      prefix: bullPrefix(pool.names),
    });
    try {
      const token = randomUUID();
      const job = (await bull.getNextJob(token))!;
      const result: JobResult = {
        message: {
          id: 'msg_old',
          model: req.model,
          role: 'assistant',
          content: [{ type: 'text', text: 'an old answer', citations: null }],
          stop_reason: 'end_turn',
          stop_sequence: null,
          usage: { input_tokens: 7, output_tokens: 3 },
        },
        latencyMs: 5,
        requestId: 'req_old',
        attempts: 1,
        completedAt: Date.now(),
      };
      await job.moveToCompleted(result, token, false);
    } finally {
      await bull.close();
    }
    const status = await pool.producer.status(id);
    expect(status).toMatchObject({ state: 'completed', data: { request: req } });
    expect((await pool.producer.waitForResult(id)).message.id).toBe('msg_old');
    const again = await pool.producer.enqueueJob(req, { idempotencyKey: 'old-1' });
    expect(again).toMatchObject({ id, created: false });
  });

  it('a waiting job without a digest is completed by this version: it keeps the digest of its request', async () => {
    const pool = await openTestPool('upgwait');
    const req = request('Waiting since before the upgrade.', 20);
    const id = await pool.producer.enqueue(req);
    await withoutDigest(pool, id);
    await pool.worker({ limiter: { windowMs: 5_000, limits: { tokens: 100_000 } } });
    await allCompleted(pool, [id], 15_000);
    const job = (await pool.job(id))!;
    expect(job.data.request).toBeUndefined();
    expect(job.data).toMatchObject({ digest: requestDigest(req), model: req.model });
  });

  it('a dead letter it wrote (request in the letter and in the failed job, no bytes counted) retries from the CLI in full', async () => {
    const pool = await openTestPool('upgdead', { spendCappedKeys: ['sk-capped'] });
    const req = request('Refused before the upgrade.', 20);
    const id = await pool.producer.enqueue(req, { attempts: 5 });
    const capped = await pool.worker({
      apiKey: 'sk-capped',
      limiter: { windowMs: 5_000, limits: { tokens: 100_000 } },
    });
    await until(async () => (await listDeadLetters(pool!.dlq)).length === 1, 15_000);
    await capped.stop();
    // As the previous version left it: the failed job holds its request, the letter has no
    // digest, and nothing counted the letter's bytes.
    const letter = (await pool.dlq.getJob(id))!;
    const { digest: _digest, ...oldData } = letter.data.data;
    await letter.updateData({ ...letter.data, data: oldData as JobData });
    await (await pool.job(id))!.updateData(oldData as JobData);
    await pool.redis.del(
      `${bullPrefix(pool.names)}:dead:sizes`,
      `${bullPrefix(pool.names)}:dead:bytes`,
    );

    const env = pool.cliEnv();
    const retried = await runCli(['dlq', 'retry', id], env);
    expect(retried.code, retried.stderr).toBe(0);
    await pool.worker({ limiter: { windowMs: 5_000, limits: { tokens: 100_000 } } });
    await allCompleted(pool, [id], 15_000);
    const done = (await pool.job(id))!;
    expect(done.returnvalue.message.usage.input_tokens).toBe(countMockTokens(req));
    expect(done.data.request).toBeUndefined();
    expect(done.data.digest).toBe(requestDigest(req));
    expect(await deadLetterHeld(pool.dlq)).toMatchObject({ bytes: 0, dropped: 0 });
  });
});
