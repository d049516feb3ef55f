import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { checkBatchable } from '../../producer/batches/batch-jobs.ts';
import { Producer } from '../../producer/producer.ts';
import type { EnqueueOptions } from '../../producer/producer-options.ts';
import { parseDeadline, resolveVia } from '../../shared/batch-via.ts';
import {
  batchDeploymentsOf,
  globalLimits,
  poolNamesOf,
  scopeLimitsOf,
} from '../../shared/config-views.ts';
import {
  ConfigError,
  CostExceedsLimitError,
  LlmqError,
  QueueFullError,
  RequestValidationError,
} from '../../shared/errors.ts';
import type { JobData } from '../../shared/job.ts';
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

/** The requests' text from a file or standard input (0); a ConfigError when it cannot be read. */
function readInput(file: string | 0): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    const what = file === 0 ? 'standard input' : `--file ${file}`;
    throw new ConfigError(`${what} cannot be read (${(err as Error).message}): check the path`);
  }
}

export function registerEnqueueCommand(program: Command): void {
  queueOptions(
    program
      .command('enqueue')
      .description(
        'enqueue Messages requests (JSON, or JSON Lines for many); prints one job id per line. ' +
          'Every request is checked before any is added; when the queue is full (without --wait) ' +
          'the command stops there: the lines before that one were enqueued (their ids are printed)',
      )
      .option('--file <file>', 'read from a file; - or nothing for standard input')
      .option('--priority <p>', 'interactive, default, batch, or a number (1 is the most urgent)')
      .option('--tenant <name>', 'charge the tenant’s scope too')
      .option('--deployment <name>', 'send the jobs to this deployment of the pool only')
      .option('--via <path>', 'messages, batches (run by `llmq batches run`) or auto', 'messages')
      .option('--deadline <duration>', 'when the jobs must be done, such as 6h (for --via auto)')
      .option(
        '--retry-for <duration>',
        'retry transient failures (529, 5xx, timeouts, dropped connections) this long, such as 30m; 0 makes them spend attempts (default: the worker’s, 10m)',
      )
      .option('--wait', 'when the queue is full, wait for room instead of stopping'),
  ).action(async (flags: Record<string, unknown>) => {
    const config = configFrom(flags);
    const file = typeof flags['file'] === 'string' && flags['file'] !== '-' ? flags['file'] : 0;
    const priority = resolvePriority(flags['priority'] as string | undefined);
    const deadlineMs =
      typeof flags['deadline'] === 'string' ? parseDeadline(flags['deadline']) : undefined;
    const via = resolveVia(String(flags['via'] ?? 'messages'), deadlineMs);
    const deadlineAt = deadlineMs !== undefined ? Date.now() + deadlineMs : undefined;
    // Checked by the config; only a flag sets a job's own (LLMQ_RETRY_FOR is the worker's).
    const retryForMs = flags['retryFor'] !== undefined ? config.retryForMs : undefined;
    const requests = parseRequests(readInput(file));
    const deployment = typeof flags['deployment'] === 'string' ? flags['deployment'] : undefined;
    await withRedis(config, async (redis) => {
      const producer = new Producer({
        redis,
        names: namesOf(config),
        limits: globalLimits(config),
        scopes: scopeLimitsOf(config),
        maxDepth: config.maxDepth,
        maxDepthBytes: config.maxDepthBytes,
        deployments: poolNamesOf(config),
        batchDeployments: batchDeploymentsOf(config),
      });
      try {
        const tenant = typeof flags['tenant'] === 'string' ? flags['tenant'] : undefined;
        const options: EnqueueOptions = {
          priority,
          wait: flags['wait'] === true,
          via,
          ...(deadlineAt ? { deadlineAt } : {}),
          ...(tenant ? { tenant } : {}),
          ...(deployment ? { deployment } : {}),
          ...(retryForMs !== undefined ? { retryForMs } : {}),
        };
        // Validate every request before adding any, so a bad line leaves nothing behind; the
        // fleet's stored limits first, so a request that never fits them is one too.
        await producer.loadLimits(true);
        await producer.loadCosting(requests);
        const datas = requests.map((r, i) => {
          try {
            if (via === 'batches') checkBatchable(r, {});
            return producer.prepare(r, options);
          } catch (err) {
            throw numbered(err, i, requests.length);
          }
        });
        await addAll(producer, requests, via === 'batches' ? undefined : datas, options);
      } finally {
        await producer.close();
      }
    });
  });
}

/** A request's validation error naming it (`request 3: …`) when there are several. */
function numbered(err: unknown, i: number, count: number): unknown {
  if (count <= 1) return err;
  if (err instanceof RequestValidationError) {
    return new RequestValidationError(
      err.issues.map((x) => ({ ...x, field: `request ${i + 1}: ${x.field}` })),
    );
  }
  if (err instanceof CostExceedsLimitError) {
    return new RequestValidationError([{ field: `request ${i + 1}`, message: err.message }]);
  }
  return err;
}

/**
 * Adds the requests in chunks (one reservation and one addBulk each), printing each chunk's ids
 * once it is in. A chunk refused whole by a full queue is retried line by line, so the lines
 * that fit are added and the refusal names the first that did not.
 */
async function addAll(
  producer: Producer,
  requests: readonly unknown[],
  prepared: readonly JobData[] | undefined,
  options: EnqueueOptions,
): Promise<void> {
  let printed = 0;
  const many = {
    ...options,
    onChunk: (ids: readonly string[]) => {
      process.stdout.write(ids.map((id) => `${id}\n`).join(''));
      printed += ids.length;
    },
  };
  try {
    if (prepared) await producer.addPrepared(prepared, many);
    else await producer.enqueueMany(requests, many);
    return;
  } catch (err) {
    if (!(err instanceof QueueFullError)) throw err;
  }
  for (let i = printed; i < requests.length; i++) {
    let id: string;
    try {
      id = await producer.enqueue(requests[i], options);
    } catch (err) {
      if (!(err instanceof QueueFullError)) throw err;
      throw new LlmqError(
        'QUEUE_FULL',
        `${err.summary}: retry in ${Math.ceil(err.retryAfterMs / 1000)} s, or pass --wait to wait for room; ` +
          (i === 0
            ? 'nothing was enqueued'
            : `the ${i} request(s) before request ${i + 1} were enqueued (their ids are printed above)`),
      );
    }
    process.stdout.write(`${id}\n`);
  }
}
