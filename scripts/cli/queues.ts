import type { Command } from 'commander';
import { ConfigError, LlmqError } from '../../shared/errors.ts';
import { forgetQueue, listQueueNames } from '../../shared/queues.ts';
import { getQueueCounts, type QueueCounts } from '../../shared/status.ts';
import { configFrom, queueOptions, withRedis } from './common.ts';

const COLUMNS = ['waiting', 'active', 'delayed', 'completed', 'failed', 'dead'] as const;

/** The queues as a table, one row each, numbers right-aligned under their state. */
export function formatQueues(rows: readonly { queue: string; counts: QueueCounts }[]): string {
  const head = ['queue', ...COLUMNS];
  const body = rows.map((r) => [r.queue, ...COLUMNS.map((c) => String(r.counts[c]))]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [line(head), ...body.map(line)].join('\n');
}

/** Adds `llmq queues` (every queue with its counts) and `llmq queues forget NAME`. */
export function registerQueuesCommand(program: Command): void {
  const queues = queueOptions(
    program
      .command('queues')
      .description(
        'list the queues under the prefix with their jobs per state; a registered queue whose ' +
          'keys are gone is not listed (`queues forget NAME` takes it out of the registry)',
      )
      .option('--json', 'print one JSON array'),
  ).action(async (flags: Record<string, unknown>) => {
    const config = configFrom(flags);
    await withRedis(config, async (redis) => {
      const { live, gone } = await listQueueNames(redis, config.prefix);
      const rows = await Promise.all(
        live.map(async (queue) => ({
          queue,
          counts: await getQueueCounts(redis, { prefix: config.prefix, queue }),
        })),
      );
      if (flags['json']) {
        process.stdout.write(`${JSON.stringify(rows)}\n`);
        return;
      }
      process.stdout.write(
        rows.length > 0
          ? `${formatQueues(rows)}\n`
          : `no queue under prefix ${config.prefix}: enqueue a job or start a worker\n`,
      );
      if (gone.length > 0) {
        process.stdout.write(
          `registered but with no keys left: ${gone.join(', ')} (llmq queues forget NAME removes one)\n`,
        );
      }
    });
  });

  queues
    .command('forget <name>')
    .description(
      'take an empty queue out of the registry and delete what is left of its keys; ' +
        'refused while it holds jobs or dead letters',
    )
    .option('--prefix <prefix>', 'Redis key prefix (env LLMQ_PREFIX)', undefined)
    .option('--config <file>', 'JSON config file (env LLMQ_CONFIG)', undefined)
    .action(async (name: string, flags: Record<string, unknown>) => {
      const config = configFrom({ ...flags, ...queues.opts() });
      const names = { prefix: config.prefix, queue: name };
      await withRedis(config, async (redis) => {
        const { live, gone } = await listQueueNames(redis, config.prefix);
        if (!live.includes(name) && !gone.includes(name)) {
          const known = [...live, ...gone];
          throw new ConfigError(
            `no queue ${JSON.stringify(name)} under prefix ${config.prefix}` +
              (known.length ? ` (known: ${known.join(', ')})` : ''),
          );
        }
        const counts = await getQueueCounts(redis, names);
        const held = COLUMNS.filter((c) => counts[c] > 0);
        if (held.length > 0) {
          throw new LlmqError(
            'QUEUE_NOT_EMPTY',
            `queue ${name} is not empty (${held.map((c) => `${c} ${counts[c]}`).join(', ')}): ` +
              'let it drain, purge its dead letters (llmq dlq purge) or clean it in the dashboard first',
          );
        }
        await forgetQueue(redis, names);
        process.stdout.write(`forgot queue ${name} (prefix ${config.prefix})\n`);
      });
    });
}
