/**
 * Builds never mix on a queue: every build stamps it, and a worker refuses a queue served by
 * another build (stamped or from before the stamp) or holding jobs of a newer format, exiting
 * non-zero at once with one line (its connections closed, nothing keeping it alive).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { JOB_FORMAT } from '../shared/job.ts';
import { llmqKey, queueStampKey, workersKey } from '../shared/keys.ts';
import { VERSION } from '../shared/version.ts';
import { openPool, type Pool, request } from './fixtures/worker-harness.ts';

let pool: Pool;
beforeEach(async () => {
  pool = await openPool('versions');
});
afterEach(async () => {
  await pool?.cleanup();
});

/** Redis's clock, ms: leases and marks are on it. */
async function redisNow(): Promise<number> {
  const [s, us] = await pool.redis.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
}

/** `llmq worker` on the pool's queue: its exit code and what it printed. */
async function cliWorker() {
  const proc = pool.startCli(['worker', '--concurrency', '1'], pool.cliEnv());
  const code = await proc.exited();
  return { code, stderr: proc.stderr() };
}

describe('a worker refuses a queue of another build, and exits at once', () => {
  it('workers of another layout stamp are alive', async () => {
    const fleet = llmqKey(pool.names, 'fleet', 'layout');
    await pool.redis.zadd(fleet, (await redisNow()) + 60_000, '0123456789abcdef:w-other');
    const { code, stderr } = await cliWorker();
    expect(code).not.toBe(0);
    expect(stderr).toMatch(
      /is served by 1 worker\(s\) of another llmq build \(layout 0123456789abcdef/,
    );
  });

  it('workers of a build from before the stamp are alive (present, unstamped)', async () => {
    await pool.redis.zadd(workersKey(pool.names), (await redisNow()) + 60_000, 'w-old-build');
    const { code, stderr } = await cliWorker();
    expect(code).not.toBe(0);
    expect(stderr).toMatch(
      /another llmq build \(layout none: a build from before the layout stamp/,
    );
    // Nothing of this build was registered.
    expect(await pool.redis.zcard(llmqKey(pool.names, 'fleet', 'layout'))).toBe(0);
  });

  it('the queue holds jobs of a newer format', async () => {
    await pool.redis.hset(queueStampKey(pool.names), 'format', String(JOB_FORMAT + 1));
    const { code, stderr } = await cliWorker();
    expect(code).not.toBe(0);
    expect(stderr).toContain(
      `holds jobs of format ${JOB_FORMAT + 1}, written by a newer llmq build`,
    );
  });
});

describe('every build stamps the queue', () => {
  it('a producer stamps the format it writes; a worker of this build runs on it and stamps its layout', async () => {
    const id = await pool.producer.enqueue(request('stamped', 20));
    expect(await pool.redis.hgetall(queueStampKey(pool.names))).toMatchObject({
      format: String(JOB_FORMAT),
      producer_version: VERSION,
    });
    const worker = await pool.worker();
    expect(await pool.producer.waitForResult(id)).toBeDefined();
    expect(await pool.redis.hget(queueStampKey(pool.names), 'version')).toBe(VERSION);
    await worker.stop();
  });
});
