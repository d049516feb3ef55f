import type { Command } from 'commander';
import { resolveConfig } from '../../shared/config.ts';
import { assertRedis } from '../../shared/redis.ts';
import { startSubmitterFor } from '../../worker/batches/submitter-process.ts';

/** Adds `llmq batches run`: the batch submitter of a queue, until Ctrl-C. */
export function registerBatchesCommand(program: Command): Command {
  const batches = program
    .command('batches')
    .description('Message Batches (half price, within 24 h)');
  batches
    .command('run')
    .description(
      "submit the queue's batch-bound jobs (enqueued with via 'batches') as Message Batches, poll them, and complete each job with its result; resumes the batches in flight",
    )
    .option('--queue <name>', 'queue name (env LLMQ_QUEUE)')
    .option('--prefix <prefix>', 'Redis key prefix (env LLMQ_PREFIX)')
    .action(async (flags: { queue?: string; prefix?: string }) => {
      const config = resolveConfig({ flags: { ...flags }, env: process.env });
      await assertRedis(config.redisUrl);
      const handle = startSubmitterFor(config);
      const stop = () => void handle.stop();
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      await handle.done;
    });
  return batches;
}
