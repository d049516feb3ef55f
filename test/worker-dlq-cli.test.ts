import { describe, expect, it } from 'vitest';
import type { DeadLetter } from '../shared/job.ts';
import {
  type DeadLetterSummary,
  listDeadLetters,
  retryDeadLetter,
} from '../worker/dead-letters.ts';
import {
  allCompleted,
  type Pool,
  poolsPerTest,
  request,
  runCli,
} from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const openTestPool = poolsPerTest();

async function failed(p: Pool, id: string): Promise<void> {
  await until(async () => (await p.queue.getJobState(id)) === 'failed', 15_000);
}

describe('llmq dlq', () => {
  it('lists, shows and retries a dead letter, which completes under its own id; purge deletes the rest', async () => {
    const pool = await openTestPool('dlqcli', { faults: { overloaded: 1 } });
    const env = pool.cliEnv();
    await pool.worker({
      backoff: { baseMs: 20, capMs: 50 },
      breaker: { threshold: 1_000 },
      limiter: { windowMs: 5_000, limits: { tokens: 100_000 } },
    });
    const id = await pool.producer.enqueue(request('Come back to me.'), {
      attempts: 1,
      retryForMs: 0,
    });
    await failed(pool, id);

    const list = await runCli(['dlq', 'list', '--json'], env);
    expect(list.code, list.stderr).toBe(0);
    const letters = JSON.parse(list.stdout) as DeadLetterSummary[];
    expect(letters).toEqual([
      expect.objectContaining({
        id,
        errorClass: 'OverloadedError',
        status: 529,
        attempts: 1,
        model: 'claude-test-1',
      }),
    ]);
    expect(letters[0]!.reason).toBe('gave up after 1 attempt: 529 overloaded_error: Overloaded');

    const show = await runCli(['dlq', 'show', id], env);
    expect(show.code, show.stderr).toBe(0);
    const letter = JSON.parse(show.stdout) as DeadLetter;
    expect(letter.data.request).toEqual(request('Come back to me.'));
    expect(letter.attempts).toEqual([
      expect.objectContaining({ outcome: 'retryable', status: 529 }),
    ]);

    // The provider recovers; the person retries the letter.
    pool.mock.setFaults({});
    const retry = await runCli(['dlq', 'retry', id], env);
    expect(retry.code, retry.stderr).toBe(0);
    expect(retry.stdout.trim()).toBe(id);
    await allCompleted(pool, [id], 60_000);
    const job = (await pool.job(id))!;
    expect(job.returnvalue.attempts).toBe(1);
    expect(job.data.history ?? []).toEqual([]);
    expect(await listDeadLetters(pool.dlq)).toEqual([]);

    // Another one dies; purge removes it, and it can no longer be retried.
    pool.mock.setFaults({ overloaded: 1 });
    const other = await pool.producer.enqueue(request('Let me go.'), {
      attempts: 1,
      retryForMs: 0,
    });
    await failed(pool, other);
    const purge = await runCli(['dlq', 'purge'], env);
    expect(purge.code, purge.stderr).toBe(0);
    expect(purge.stdout.trim()).toBe('purged 1 dead letter');
    expect(await listDeadLetters(pool.dlq)).toEqual([]);
    expect(await retryDeadLetter(pool.dlq, pool.queue, other)).toBeUndefined();
    expect(await pool.queue.getJobState(other)).toBe('failed');
    // The completed job is untouched.
    expect(await pool.queue.getJobState(id)).toBe('completed');
  }, 180_000);

  it('retries a letter whose job was removed meanwhile under the same id', async () => {
    const pool = await openTestPool('dlqgone', { faults: { overloaded: 1 } });
    await pool.worker({
      breaker: { threshold: 1_000 },
      limiter: { windowMs: 5_000, limits: { tokens: 100_000 } },
    });
    const id = await pool.producer.enqueue(request('Gone but not forgotten.'), {
      attempts: 1,
      retryForMs: 0,
    });
    await failed(pool, id);
    await pool.queue.remove(id);
    expect(await pool.job(id)).toBeUndefined();

    pool.mock.setFaults({});
    expect(await retryDeadLetter(pool.dlq, pool.queue, id)).toBe(id);
    await allCompleted(pool, [id], 60_000);
    expect((await pool.job(id))!.returnvalue.attempts).toBe(1);
    expect(await listDeadLetters(pool.dlq)).toEqual([]);
  });

  it('does not add a second job for a letter whose job was already retried another way (Bull Board)', async () => {
    const pool = await openTestPool('dlqtwice', { faults: { overloaded: 1 } });
    await pool.worker({
      breaker: { threshold: 1_000 },
      limiter: { windowMs: 5_000, limits: { tokens: 100_000 } },
    });
    const id = await pool.producer.enqueue(request('Retried from the board.'), {
      attempts: 1,
      retryForMs: 0,
    });
    await failed(pool, id);
    pool.mock.setFaults({});
    await (await pool.job(id))!.retry('failed');
    await allCompleted(pool, [id], 60_000);

    expect(await retryDeadLetter(pool.dlq, pool.queue, id)).toBe(id);
    expect(await listDeadLetters(pool.dlq)).toEqual([]);
    const counts = await pool.counts();
    expect(
      counts.completed + counts.prioritized + counts.wait + counts.active + counts.delayed,
    ).toBe(1);
  });
});
