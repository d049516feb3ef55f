import { createHash } from 'node:crypto';
import type { Via } from '../../shared/batch-via.ts';
import { answerText } from '../../shared/combine.ts';
import { LlmqError, RedisUnavailableError } from '../../shared/errors.ts';
import type { JobResult } from '../../shared/job.ts';
import { batchSavingUsd, formatUsd } from '../../shared/prices.ts';
import type { PriorityLane } from '../../shared/priority.ts';
import { JobFailedError, JobNotFoundError } from '../errors.ts';
import type { EnqueuedFlow } from '../flows.ts';
import { jobIdForKey } from '../idempotency.ts';
import type { Producer } from '../producer.ts';
import { collectFiles } from './collect-files.ts';
import { readFileContent } from './file-content.ts';
import { planDocument, summaryFlow, waitForDocument } from './long-document.ts';
import { Progress, type ProgressState } from './progress.ts';
import { type ResultLine, ResultsFile } from './results-file.ts';

export const DEFAULT_SUMMARY_PROMPT =
  'Summarize the document the user sends in three to five sentences. Keep the names, numbers and ' +
  'conclusions that matter; add nothing that is not in the document.';

export interface BatchSummarizeOptions {
  /**
   * Files and folders (.txt, .md and .pdf, folders recursively). A PDF is sent whole as a
   * document block (never split).
   */
  readonly paths: readonly string[];
  /** Take images too (PNG, JPEG, GIF, WebP), each sent as an image block. @default false */
  readonly images?: boolean;
  /** The JSONL results file; appended to, and read first to resume. */
  readonly out: string;
  /** The producer to enqueue with (its queue, bounds and limits). */
  readonly producer: Producer;
  /** @default 'claude-haiku-4-5' */
  readonly model?: string;
  /** @default 512 */
  readonly maxTokens?: number;
  /**
   * Documents longer than this many tokens (estimated) are summarized in parts of at most this
   * size, then the parts' summaries combined. @default what the model's context leaves
   */
  readonly chunkTokens?: number;
  /** The system prompt. @default {@link DEFAULT_SUMMARY_PROMPT} */
  readonly prompt?: string;
  /** @default 'batch' */
  readonly priority?: PriorityLane | number | string;
  readonly tenant?: string;
  /** Wait for the results. False: enqueue and return (a later run collects them). @default true */
  readonly wait?: boolean;
  /** Enqueue files whose earlier result was an error again (with a fresh idempotency key). @default false */
  readonly retryFailed?: boolean;
  /** `batches`: through Message Batches (a batch submitter must run). @default 'messages' */
  readonly via?: Via;
  /** For `via: 'batches'`: when the jobs must be done by (ms since the epoch). */
  readonly deadlineAt?: number;
  /** Stops the run: jobs stay queued, the results file stays valid. */
  readonly signal?: AbortSignal;
  /** Where progress goes; a TTY gets a redrawn bar. @default process.stderr */
  readonly progress?: { write(chunk: string): boolean; readonly isTTY?: boolean };
  /** Where the final report goes. @default process.stdout */
  readonly report?: { write(chunk: string): boolean };
  /** Called with each line as it is written. */
  readonly onLine?: (line: ResultLine) => void;
}

export interface BatchReport {
  readonly files: number;
  /** Files whose result was already in the out file. */
  readonly skipped: number;
  /** Jobs this run added. */
  readonly enqueued: number;
  /** Files whose job was already there (queued, running or finished): re-attached, not added. */
  readonly reattached: number;
  /** Files with a summary (from this run or an earlier one). */
  readonly succeeded: number;
  /** Files whose job was dead-lettered or could not be enqueued (from this run or an earlier one). */
  readonly failed: readonly {
    readonly file: string;
    readonly id: string | null;
    readonly error: string;
  }[];
  /** Files still without a result (with `wait: false`, or interrupted). */
  readonly pending: number;
  /** Empty files, left out. */
  readonly empty: readonly string[];
  /** Files summarized in parts (their part jobs and final job are a BullMQ flow). */
  readonly split: number;
  readonly inputTokens: number;
  readonly outputTokens: number;
  readonly elapsedMs: number;
  readonly interrupted: boolean;
  readonly via: Via;
  /** What this run's results saved by going through Message Batches, in dollars. */
  readonly savedUsd: number;
  /** 0 all succeeded (or enqueued with wait false), 1 some failed, 130 interrupted. */
  readonly exitCode: 0 | 1 | 130;
}

interface Pending {
  readonly file: string;
  readonly key: string;
  readonly id: string;
}

/**
 * Summarizes documents through the queue: one job per file, with an idempotency key from the
 * file's content and the parameters, so a rerun resumes: files whose result is already in the
 * out file are skipped, and files whose job is still queued or finished meanwhile are
 * re-attached to that job instead of enqueued again. Enqueues with backpressure (`wait: true`
 * against the depth bound), appends each result as one JSONL line as it arrives, and ends with
 * one report line (and the dead-lettered files, listed).
 */
export async function runBatchSummarize(options: BatchSummarizeOptions): Promise<BatchReport> {
  const started = Date.now();
  const model = options.model ?? 'claude-haiku-4-5';
  const maxTokens = options.maxTokens ?? 512;
  const prompt = options.prompt ?? DEFAULT_SUMMARY_PROMPT;
  const priority = options.priority ?? 'batch';
  const wait = options.wait ?? true;
  const { producer, signal, tenant } = options;
  const progressOut = options.progress ?? process.stderr;
  const reportOut = options.report ?? process.stdout;

  const files = await collectFiles(options.paths, { images: options.images ?? false });
  const results = ResultsFile.open(options.out);
  const progress = new Progress(progressOut);
  const failed: { file: string; id: string | null; error: string }[] = [];
  const empty: string[] = [];
  let succeeded = 0;
  let skipped = 0;
  let enqueued = 0;
  let reattached = 0;
  let inputTokens = 0;
  let outputTokens = 0;
  let arrived = 0;
  let savedUsd = 0;
  let split = 0;
  const via = options.via ?? 'messages';

  // What earlier runs wrote, by file: a line counts for the file's current content only.
  const earlier = new Map<string, ResultLine[]>();
  for (const line of results.existing) {
    const list = earlier.get(line.file) ?? [];
    list.push(line);
    earlier.set(line.file, list);
  }

  const state = (): ProgressState => ({
    total: files.length - empty.length,
    succeeded,
    failed: failed.length,
    tokens: inputTokens + outputTokens,
    arrived,
    startedAt: started,
  });

  const write = (line: ResultLine) => {
    results.append(line);
    options.onLine?.(line);
    if ('summary' in line) {
      succeeded++;
      inputTokens += line.usage.input_tokens;
      outputTokens += line.usage.output_tokens;
    } else {
      failed.push({ file: line.file, id: line.id, error: line.error });
    }
    arrived++;
    progress.update(state());
  };

  // Each wait settles quietly; the first unexpected error (Redis gone) is thrown at the end.
  const waits: Promise<void>[] = [];
  let unexpected: unknown;
  const failedWait = (p: Pending) => (err: unknown) => {
    if (err instanceof JobFailedError) write({ file: p.file, id: p.id, error: err.reason });
    // Removed meanwhile (cancelled, or its retention ran out): no line, so a rerun enqueues it again.
    else if (err instanceof JobNotFoundError)
      progress.note(`warning: job ${p.id} of ${p.file} was removed; rerun to summarize it`);
    else if (!signal?.aborted) unexpected ??= err;
  };
  const collect = (p: Pending) => {
    waits.push(
      producer.waitForResult(p.id, { via, ...(signal ? { signal } : {}) }).then((result) => {
        if (result.batchId) savedUsd += batchSavingUsd(result.message.model, usageOf(result));
        write({ file: p.file, id: p.id, summary: answerText(result), usage: usageOf(result) });
      }, failedWait(p)),
    );
  };
  const collectDocument = (p: Pending, flow: EnqueuedFlow) => {
    waits.push(
      waitForDocument(producer, flow, { via, signal }).then((d) => {
        savedUsd += d.savedUsd;
        const summary = answerText(d.result);
        write({ file: p.file, id: p.id, summary, usage: d.usage, parts: d.parts });
      }, failedWait(p)),
    );
  };

  // The fleet's limits bound a call's input (Message Batches run outside them).
  const inputRoom =
    via === 'messages' ? await producer.inputRoom(model, maxTokens, tenant) : undefined;
  let interrupted = false;
  try {
    progress.note(`batch: ${files.length} file(s), results in ${options.out}`);
    for (const file of files) {
      if (signal?.aborted) break;
      const content = await readFileContent(file);
      if (content.kind === 'empty') {
        empty.push(file);
        continue;
      }
      // A PDF or an image is one block, keyed by its bytes' hash; only text is split.
      const text = content.kind === 'text' ? content.text : content.fingerprint;
      const plan =
        content.kind === 'text'
          ? planDocument(text, {
              model,
              maxTokens,
              prompt,
              chunkTokens: options.chunkTokens,
              inputRoom,
            })
          : { parts: [], partTokens: 0 };
      const parted = plan.parts.length > 1;
      const baseKey = idempotencyKey({
        model,
        maxTokens,
        prompt,
        text,
        ...(parted ? { partTokens: plan.partTokens } : {}),
      });
      const decided = decide(
        baseKey,
        earlier.get(file) ?? [],
        tenant,
        options.retryFailed ?? false,
      );
      if (decided.kind === 'done') {
        skipped++;
        if ('summary' in decided.line) succeeded++;
        else failed.push({ file, id: decided.line.id, error: decided.line.error });
        continue;
      }
      if (content.kind === 'invalid') {
        write({ file, id: jobIdForKey(decided.key, tenant), error: content.reason });
        continue;
      }
      const request = {
        model,
        max_tokens: maxTokens,
        system: prompt,
        messages: [
          { role: 'user' as const, content: content.kind === 'text' ? text : [content.block] },
        ],
      };
      const enqueueOptions = {
        idempotencyKey: decided.key,
        priority,
        ...(tenant !== undefined ? { tenant } : {}),
        meta: { file },
        wait: true,
        via,
        ...(options.deadlineAt !== undefined ? { deadlineAt: options.deadlineAt } : {}),
        ...(signal ? { signal } : {}),
      };
      try {
        if (parted) {
          const flow = await producer.enqueueMapReduce(
            summaryFlow(plan.parts, { model, maxTokens, prompt }),
            enqueueOptions,
          );
          if (split++ === 0 && via === 'batches')
            progress.note(
              'note: documents summarized in parts send their parts by batch and their final call through messages: a worker must run (llmq worker)',
            );
          if (flow.created) enqueued++;
          else reattached++;
          if (wait) collectDocument({ file, key: decided.key, id: flow.id }, flow);
        } else {
          const job = await producer.enqueueJob(request, enqueueOptions);
          if (job.created) enqueued++;
          else reattached++;
          if (wait) collect({ file, key: decided.key, id: job.id });
        }
      } catch (err) {
        if (signal?.aborted) break;
        if (err instanceof RedisUnavailableError || !(err instanceof LlmqError)) throw err;
        // This file can never be enqueued as it is (too long for a limit, …): say so under the id
        // its job would have (so an edited file is tried again), and go on.
        write({ file, id: jobIdForKey(decided.key, tenant), error: err.message });
      }
      progress.update(state());
    }
    if (wait) await Promise.all(waits);
    if (unexpected !== undefined) throw unexpected;
  } finally {
    interrupted = signal?.aborted ?? false;
    results.close();
    progress.update(state(), true);
    progress.finish();
  }

  const total = files.length - empty.length;
  const pending = total - succeeded - failed.length;
  const report: BatchReport = {
    files: files.length,
    skipped,
    enqueued,
    reattached,
    succeeded,
    failed,
    pending,
    empty,
    split,
    inputTokens,
    outputTokens,
    elapsedMs: Date.now() - started,
    interrupted,
    via,
    savedUsd,
    exitCode: interrupted ? 130 : failed.length > 0 ? 1 : 0,
  };
  reportOut.write(`${reportLine(report, wait)}\n`);
  for (const f of failed)
    reportOut.write(`  dead-lettered: ${f.file}${f.id ? ` (job ${f.id})` : ''}: ${f.error}\n`);
  return report;
}

/** The one-line summary of a run. */
export function reportLine(r: BatchReport, waited = true): string {
  const parts = [
    `${r.files} file(s)`,
    `${r.succeeded} summarized`,
    `${r.failed.length} dead-lettered`,
    `${r.pending} pending`,
    `${r.enqueued} enqueued, ${r.reattached} re-attached, ${r.skipped} already done`,
  ];
  if (r.empty.length > 0) parts.push(`${r.empty.length} empty skipped`);
  if (r.split > 0) parts.push(`${r.split} summarized in parts`);
  const head = r.interrupted
    ? 'batch interrupted (jobs stay queued; rerun to resume)'
    : waited
      ? 'batch done'
      : 'batch enqueued (rerun without --no-wait to collect)';
  const saved =
    r.via === 'batches' ? `; via batches, saved ${formatUsd(r.savedUsd)} (half price)` : '';
  return `${head}: ${parts.join(', ')}; tokens ${r.inputTokens} in, ${r.outputTokens} out${saved}; ${(r.elapsedMs / 1000).toFixed(1)} s`;
}

/** The idempotency key of one file's job: its content and every parameter that shapes the summary. */
export function idempotencyKey(p: {
  model: string;
  maxTokens: number;
  prompt: string;
  text: string;
  /** For a document summarized in parts: their size, which decides them. */
  partTokens?: number;
}): string {
  const fields = ['llmq-batch-summarize/v1', p.model, p.maxTokens, p.prompt, p.text];
  if (p.partTokens !== undefined) fields.push(`parts:${p.partTokens}`);
  const h = createHash('sha256').update(JSON.stringify(fields));
  return `batch:${h.digest('hex')}`;
}

type Decision = { kind: 'done'; line: ResultLine } | { kind: 'enqueue'; key: string };

/**
 * What to do with a file given the lines earlier runs wrote for it. A line counts only when its
 * id is one this content's keys map to (the base key, or a retry's key), so an edited file is
 * summarized again. A summary means done; an error means done too, unless `retryFailed`, which
 * enqueues under the next retry key (the same key on a rerun until that retry's line exists).
 */
function decide(
  baseKey: string,
  lines: readonly ResultLine[],
  tenant: string | undefined,
  retryFailed: boolean,
): Decision {
  const keyOf = (n: number) => (n === 0 ? baseKey : `${baseKey}:retry-${n}`);
  const mine: ResultLine[] = [];
  for (let n = 0; n <= lines.length; n++) {
    const id = jobIdForKey(keyOf(n), tenant);
    for (const l of lines) if (l.id === id) mine.push(l);
  }
  const success = mine.find((l) => 'summary' in l);
  if (success) return { kind: 'done', line: success };
  const errors = mine.filter((l) => 'error' in l);
  const last = errors.at(-1);
  if (last && !retryFailed) return { kind: 'done', line: last };
  return { kind: 'enqueue', key: keyOf(errors.length) };
}

function usageOf(result: JobResult): { input_tokens: number; output_tokens: number } {
  return {
    input_tokens: result.message.usage.input_tokens,
    output_tokens: result.message.usage.output_tokens,
  };
}
