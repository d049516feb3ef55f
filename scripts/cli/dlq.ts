import type { Command } from 'commander';
import { ConfigError, formatBytes } from '../../shared/errors.ts';
import { openDeadLetterQueue, openQueue } from '../../shared/queues.ts';
import { type DeadLetterHeld, deadLetterHeld } from '../../worker/dead-letter-bounds.ts';
import {
  listDeadLetters,
  purgeDeadLetters,
  retryDeadLetter,
  showDeadLetter,
} from '../../worker/dead-letters.ts';
import { configFrom, namesOf, parseDuration, queueOptions, withRedis } from './common.ts';

/** Runs `fn` with the queue and its dead-letter queue open (`read`: opened without writing). */
async function withQueues<T>(
  flags: Record<string, unknown>,
  fn: (q: ReturnType<typeof openQueue>, dlq: ReturnType<typeof openDeadLetterQueue>) => Promise<T>,
  read = false,
): Promise<T> {
  const config = configFrom(flags);
  return withRedis(config, async (redis) => {
    const q = openQueue(redis, namesOf(config), { read });
    const dlq = openDeadLetterQueue(redis, namesOf(config), { read });
    try {
      return await fn(q, dlq);
    } finally {
      await Promise.all([q.close(), dlq.close()]);
    }
  });
}

/** What the letters hold, and what the bounds dropped: nothing is dropped unseen. */
function heldLine(h: DeadLetterHeld): string {
  const dropped =
    h.dropped === 0
      ? 'none dropped by the bounds'
      : `${h.dropped} dropped by the bounds (${formatBytes(h.droppedBytes)}, oldest first)`;
  return `dead letters hold ${formatBytes(h.bytes)}; ${dropped}`;
}

export function registerDlqCommand(program: Command): void {
  const dlq = program.command('dlq').description('list, show, retry or purge dead letters');
  queueOptions(
    dlq
      .command('list')
      .description('list dead letters, oldest first')
      .option('--json', 'one JSON array'),
  ).action(async (flags: Record<string, unknown>) => {
    await withQueues(
      flags,
      async (_q, d) => {
        const list = await listDeadLetters(d);
        if (flags['json']) {
          process.stdout.write(`${JSON.stringify(list)}\n`);
          return;
        }
        if (list.length === 0) process.stdout.write('no dead letters\n');
        for (const l of list) {
          process.stdout.write(
            `${l.id}\t${new Date(l.deadAt).toISOString()}\t${l.errorClass}${l.status ? ` ${l.status}` : ''}\t${l.reason}\n`,
          );
        }
        process.stdout.write(`${heldLine(await deadLetterHeld(d))}\n`);
      },
      true,
    );
  });
  queueOptions(
    dlq
      .command('show')
      .description('show one dead letter: request, reason, attempts')
      .argument('<id>'),
  ).action(async (id: string, flags: Record<string, unknown>) => {
    await withQueues(
      flags,
      async (_q, d) => {
        const letter = await showDeadLetter(d, id);
        if (!letter)
          throw new ConfigError(
            `no dead letter with id ${JSON.stringify(id)}: see \`llmq dlq list\``,
          );
        process.stdout.write(`${JSON.stringify(letter, null, 2)}\n`);
      },
      true,
    );
  });
  queueOptions(
    dlq
      .command('retry')
      .description('send dead letters back to the queue with fresh attempts')
      .argument('[id]')
      .option('--all', 'every dead letter'),
  ).action(async (id: string | undefined, flags: Record<string, unknown>) => {
    if (!id && !flags['all']) throw new ConfigError('dlq retry needs a job id or --all');
    if (id && flags['all']) throw new ConfigError('dlq retry takes a job id or --all, not both');
    await withQueues(flags, async (q, d) => {
      const ids = id ? [id] : (await listDeadLetters(d, 1_000_000)).map((l) => l.id);
      for (const one of ids) {
        const runId = await retryDeadLetter(d, q, one);
        if (!runId)
          throw new ConfigError(
            `no dead letter with id ${JSON.stringify(one)}: see \`llmq dlq list\``,
          );
        process.stdout.write(`${runId}\n`);
      }
    });
  });
  queueOptions(
    dlq
      .command('purge')
      .description('delete dead letters')
      .option('--older-than <duration>', 'only those older than this (90s, 15m, 12h, 7d)'),
  ).action(async (flags: Record<string, unknown>) => {
    const olderThan =
      typeof flags['olderThan'] === 'string'
        ? parseDuration(flags['olderThan'], '--older-than')
        : 0;
    await withQueues(flags, async (_q, d) => {
      const n = await purgeDeadLetters(d, olderThan);
      process.stdout.write(`purged ${n} dead letter${n === 1 ? '' : 's'}\n`);
    });
  });
}
