import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { checkBatchable } from '../../producer/batches/batch-jobs.ts';
import { parseDeadline, resolveVia } from '../../producer/batches/via.ts';
import { Producer } from '../../producer/producer.ts';
import { globalLimits, scopeLimitsOf } from '../../shared/config.ts';
import { RequestValidationError } from '../../shared/errors.ts';
import { resolvePriority } from '../../shared/priority.ts';
import { configFrom, namesOf, queueOptions, withRedis } from './common.ts';

/** Parses one JSON request, or JSON Lines (one request a line); errors name the line. */
export function parseRequests(text: string): unknown[] {
  const trimmed = text.trim();
  if (trimmed === '')
    throw new RequestValidationError([
      { field: '(input)', message: 'no request given: pass JSON or JSON Lines' },
    ]);
  try {
    const one: unknown = JSON.parse(trimmed);
    return Array.isArray(one) ? one : [one];
  } catch {
    // Not one JSON document: read it as JSON Lines.
  }
  return trimmed.split('\n').flatMap((line, i) => {
    if (line.trim() === '') return [];
    try {
      return [JSON.parse(line) as unknown];
    } catch (err) {
      throw new RequestValidationError([
        { field: `line ${i + 1}`, message: `not valid JSON (${(err as Error).message})` },
      ]);
    }
  });
}

export function registerEnqueueCommand(program: Command): void {
  queueOptions(
    program
      .command('enqueue')
      .description(
        'enqueue Messages requests (JSON, or JSON Lines for many); prints one job id per line',
      )
      .option('--file <file>', 'read from a file; - or nothing for standard input')
      .option('--priority <p>', 'interactive, default, batch, or a number (1 is the most urgent)')
      .option('--tenant <name>', 'charge the tenant’s scope too')
      .option('--via <path>', 'messages, batches (run by `llmq batches run`) or auto', 'messages')
      .option('--deadline <duration>', 'when the jobs must be done, such as 6h (for --via auto)'),
  ).action(async (flags: Record<string, unknown>) => {
    const config = configFrom(flags);
    const file = typeof flags['file'] === 'string' && flags['file'] !== '-' ? flags['file'] : 0;
    const priority = resolvePriority(flags['priority'] as string | undefined);
    const deadlineMs =
      typeof flags['deadline'] === 'string' ? parseDeadline(flags['deadline']) : undefined;
    const via = resolveVia(String(flags['via'] ?? 'messages'), deadlineMs);
    const deadlineAt = deadlineMs !== undefined ? Date.now() + deadlineMs : undefined;
    const requests = parseRequests(readFileSync(file, 'utf8'));
    await withRedis(config, async (redis) => {
      const producer = new Producer({
        redis,
        names: namesOf(config),
        limits: globalLimits(config),
        scopes: scopeLimitsOf(config),
        maxDepth: config.maxDepth,
      });
      try {
        // Validate every request before adding any, so a bad line leaves nothing behind.
        requests.forEach((r, i) => {
          try {
            if (via === 'batches') checkBatchable(r, {});
            producer.prepare(r, { priority });
          } catch (err) {
            if (err instanceof RequestValidationError && requests.length > 1) {
              throw new RequestValidationError(
                err.issues.map((x) => ({ ...x, field: `request ${i + 1}: ${x.field}` })),
              );
            }
            throw err;
          }
        });
        for (const r of requests) {
          const tenant = typeof flags['tenant'] === 'string' ? flags['tenant'] : undefined;
          process.stdout.write(
            `${await producer.enqueue(r, { priority, via, ...(deadlineAt ? { deadlineAt } : {}), ...(tenant ? { tenant } : {}) })}\n`,
          );
        }
      } finally {
        await producer.close();
      }
    });
  });
}
