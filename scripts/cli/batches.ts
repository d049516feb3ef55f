import type { Command } from 'commander';
import { assertRedis } from '../../shared/redis.ts';
import { startSubmitterFor } from '../../worker/batches/submitter-process.ts';
import { configFrom, queueOptions } from './common.ts';

/** Adds `llmq batches run`: the batch submitter of a queue, until Ctrl-C. */
export function registerBatchesCommand(program: Command): Command {
  const batches = program
    .command('batches')
    .description('Message Batches (half price, within 24 h)');
  queueOptions(batches.command('run'))
    .description(
      "submit the queue's batch-bound jobs (enqueued with via 'batches') as Message Batches, poll them, and complete each job with its result; resumes the batches in flight",
    )
    .action(async (flags: Record<string, unknown>) => {
      const config = configFrom(flags);
      await assertRedis(config.redisUrl);
      const handle = startSubmitterFor(config);
      const stop = () => void handle.stop();
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      await handle.done;
    });
  return batches;
}
