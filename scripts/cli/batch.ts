import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { runBatchSummarize } from '../../producer/batch/summarize.ts';
import { createProducer } from '../../producer/create-producer.ts';
import { parseDeadline, resolveVia } from '../../shared/batch-via.ts';
import { ConfigError } from '../../shared/errors.ts';
import { assertRedis } from '../../shared/redis.ts';
import { startSubmitterFor } from '../../worker/batches/submitter-process.ts';
import { configFrom, queueOptions } from './common.ts';

interface SummarizeFlags {
  out: string;
  model?: string;
  maxTokens?: string;
  chunkTokens?: string;
  prompt?: string;
  promptFile?: string;
  cachePrompt: boolean;
  priority?: string;
  tenant?: string;
  wait: boolean;
  retryFailed?: boolean;
  queue?: string;
  prefix?: string;
  config?: string;
  via: string;
  deadline?: string;
  images?: boolean;
}

/** Adds `llmq batch summarize PATH… --out FILE`. */
export function registerBatchCommand(program: Command): Command {
  const batch = program.command('batch').description('batch runs through the queue');
  queueOptions(batch.command('summarize'))
    .description(
      'summarize .txt, .md and .pdf files (folders recursively) through the queue, one job per file (a long one in parts, a PDF by page ranges), results as JSON Lines; ' +
        'a rerun resumes where the last one stopped. Exit 0 when all succeeded, 1 when some were refused or dead-lettered, 130 when interrupted',
    )
    .argument('<paths...>', 'files and folders')
    .requiredOption('--out <file>', 'JSONL results file (appended; read first to resume)')
    .option('--model <model>', 'model to summarize with', 'claude-haiku-4-5')
    .option('--max-tokens <n>', 'max_tokens of each summary', '512')
    .option(
      '--chunk-tokens <n>',
      "summarize text longer than this many tokens in parts of at most this size, then combine the parts' summaries (default: when a document does not fit the fleet's limits or the model's context)",
    )
    .option('--prompt <text>', 'system prompt')
    .option('--prompt-file <file>', 'read the system prompt from a file')
    .option(
      '--no-cache-prompt',
      "don't mark the prompt for the API's prompt cache (marked when it is long enough: 1,024 tokens, Haiku 2,048)",
    )
    .option(
      '--priority <p>',
      'interactive, default, batch, or a number (1 is the most urgent)',
      'batch',
    )
    .option('--tenant <name>', 'the tenant the jobs belong to')
    .option('--no-wait', 'enqueue and exit; a later run collects the results')
    .option(
      '--retry-failed',
      'enqueue again the files whose earlier result was an error or a refusal',
    )
    .option('--images', 'summarize images too (.png, .jpg, .gif, .webp), each sent as an image')
    .option(
      '--via <path>',
      'messages (now), batches (Message Batches: half price, within 24 h), or auto (batches when --deadline leaves an hour or more)',
      'messages',
    )
    .option(
      '--deadline <duration>',
      'when the run must be done, such as 90m, 6h or 2d (for --via auto)',
    )
    .action(async (paths: string[], flags: SummarizeFlags) => {
      const config = configFrom({ ...flags });
      const maxTokens = Number(flags.maxTokens);
      if (!Number.isInteger(maxTokens) || maxTokens < 1) {
        throw new ConfigError(
          `--max-tokens must be a whole number from 1 up, got ${JSON.stringify(flags.maxTokens)}`,
        );
      }
      const chunkTokens = flags.chunkTokens === undefined ? undefined : Number(flags.chunkTokens);
      if (chunkTokens !== undefined && !(Number.isInteger(chunkTokens) && chunkTokens >= 1_000)) {
        throw new ConfigError(
          `--chunk-tokens must be a whole number from 1000 up, got ${JSON.stringify(flags.chunkTokens)}`,
        );
      }
      if (flags.prompt !== undefined && flags.promptFile !== undefined) {
        throw new ConfigError('--prompt and --prompt-file exclude each other: give one');
      }
      let prompt = flags.prompt;
      if (flags.promptFile !== undefined) {
        try {
          prompt = readFileSync(flags.promptFile, 'utf8').trim();
        } catch (err) {
          throw new ConfigError(
            `--prompt-file ${flags.promptFile} cannot be read (${(err as Error).message})`,
          );
        }
      }
      const deadlineMs = flags.deadline !== undefined ? parseDeadline(flags.deadline) : undefined;
      const via = resolveVia(flags.via, deadlineMs);
      await assertRedis(config.redisUrl);
      const producer = createProducer(config);
      // Through batches, this command runs the batch submitter too (one per queue takes turns).
      const submitter = via === 'batches' ? startSubmitterFor(config) : undefined;
      const ac = new AbortController();
      const onSigint = () => {
        if (ac.signal.aborted) process.exit(130);
        process.stderr.write(
          '\ninterrupted: stopping (jobs stay queued; Ctrl-C again to quit at once)\n',
        );
        ac.abort();
      };
      process.on('SIGINT', onSigint);
      try {
        const report = await runBatchSummarize({
          paths,
          out: flags.out,
          producer,
          model: flags.model ?? 'claude-haiku-4-5',
          maxTokens,
          ...(chunkTokens !== undefined ? { chunkTokens } : {}),
          ...(prompt !== undefined ? { prompt } : {}),
          cachePrompt: flags.cachePrompt,
          priority: flags.priority ?? 'batch',
          ...(flags.tenant !== undefined ? { tenant: flags.tenant } : {}),
          wait: flags.wait,
          retryFailed: flags.retryFailed ?? false,
          images: flags.images ?? false,
          signal: ac.signal,
          via,
          ...(deadlineMs !== undefined ? { deadlineAt: Date.now() + deadlineMs } : {}),
        });
        process.exitCode = report.exitCode;
      } finally {
        process.off('SIGINT', onSigint);
        await submitter?.stop();
        await producer.close();
      }
    });
  return batch;
}
