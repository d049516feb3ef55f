import type { Via } from '../../shared/batch-via.ts';
import { formatUsd } from '../../shared/prices.ts';
import { type PriorityLane, resolvePriority } from '../../shared/priority.ts';
import { DEFAULT_SUMMARY_PROMPT } from '../documents/long-document.ts';
import type { Producer } from '../producer.ts';
import { BatchRun, type RunSettings } from './batch-run.ts';
import { collectFiles } from './collect-files.ts';
import { Progress } from './progress.ts';
import { type ResultLine, ResultsFile } from './results-file.ts';
import { RunEta } from './run-eta.ts';

export { DEFAULT_SUMMARY_PROMPT } from '../documents/long-document.ts';

export interface BatchSummarizeOptions {
  /**
   * Files and folders (.txt, .md and .pdf, folders recursively). A PDF is sent whole as a
   * document block when it fits one call, else in parts by page ranges.
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
   * Text longer than this many tokens (estimated) is summarized in parts of at most this size,
   * then the parts' summaries combined. @default what the fleet's limits and the model's context
   * leave (PDFs are always cut by them)
   */
  readonly chunkTokens?: number;
  /** The system prompt. @default {@link DEFAULT_SUMMARY_PROMPT} */
  readonly prompt?: string;
  /**
   * Mark the prompt for the API's prompt cache when it is long enough to be cached (1,024
   * tokens; Haiku 2,048): one job writes it, the others read it at a tenth of the price, and
   * reads do not count toward the input limit. @default true
   */
  readonly cachePrompt?: boolean;
  /** @default 'batch' */
  readonly priority?: PriorityLane | number | string;
  readonly tenant?: string;
  /** Wait for the results. False: enqueue and return (a later run collects them). @default true */
  readonly wait?: boolean;
  /**
   * Enqueue files whose earlier result was an error or a refusal again (with a fresh idempotency
   * key). @default false
   */
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
  /** Files whose job was dead-lettered (from this run or an earlier one). */
  readonly failed: readonly {
    readonly file: string;
    readonly id: string | null;
    readonly error: string;
  }[];
  /**
   * Files refused before they were queued (from this run or an earlier one): why, and what would
   * make them fit. `--retry-failed` tries them again.
   */
  readonly refused: readonly {
    readonly file: string;
    readonly id: string;
    readonly reason: string;
  }[];
  /** Files still without a result (with `wait: false`, or interrupted). */
  readonly pending: number;
  /** Empty files, left out. */
  readonly empty: readonly string[];
  /** Files summarized in parts (their part jobs and final job are a BullMQ flow), any run. */
  readonly split: number;
  readonly inputTokens: number;
  readonly outputTokens: number;
  readonly elapsedMs: number;
  readonly interrupted: boolean;
  readonly via: Via;
  /** What this run's results saved by going through Message Batches, in dollars. */
  readonly savedUsd: number;
  /** 0 all succeeded (or enqueued with wait false), 1 some were refused or failed, 130 interrupted. */
  readonly exitCode: 0 | 1 | 130;
}

/**
 * Summarizes documents through the queue: one job per file, with an idempotency key from the
 * file's content and the parameters, so a rerun resumes: files whose result is already in the
 * out file are skipped, and files whose job is still queued or finished meanwhile are
 * re-attached to that job instead of enqueued again. Each file is a document
 * (`Producer.enqueueDocument`): one job when it fits a call, else its parts (text by paragraphs,
 * a PDF by page ranges) and a job combining them. Enqueues with backpressure (`wait: true`
 * against the depth bound), appends each result as one JSONL line as it arrives, and ends with
 * one report line, then the refused and the dead-lettered files, listed.
 */
export async function runBatchSummarize(options: BatchSummarizeOptions): Promise<BatchReport> {
  const started = Date.now();
  const settings = settingsOf(options);
  const { signal, via } = settings;
  const files = await collectFiles(options.paths, { images: options.images ?? false });
  const results = ResultsFile.open(options.out);
  const progress = new Progress(options.progress ?? process.stderr);
  const run = new BatchRun(settings, files, results, progress, etaOf(settings));
  let interrupted = false;
  try {
    progress.note(`batch: ${files.length} file(s), results in ${options.out}`);
    await run.survey();
    progress.update(run.state(), true);
    if (!signal?.aborted) await run.enqueueAll();
    await run.settled();
  } finally {
    interrupted = signal?.aborted ?? false;
    results.close();
    progress.update(run.state(), true);
    progress.finish();
  }
  const report = reportOf(run, files.length, started, interrupted, via);
  const reportOut = options.report ?? process.stdout;
  reportOut.write(`${reportLine(report, settings.wait)}\n`);
  for (const f of report.refused) reportOut.write(`  refused: ${f.file}: ${f.reason}\n`);
  for (const f of report.failed)
    reportOut.write(`  dead-lettered: ${f.file}${f.id ? ` (job ${f.id})` : ''}: ${f.error}\n`);
  if (report.refused.length + report.failed.length > 0)
    reportOut.write('  (--retry-failed tries these files again)\n');
  return report;
}

/** The run's ETA from the queue's forecast (Message Batches run outside it: none). */
function etaOf(s: RunSettings): RunEta | undefined {
  if (s.via !== 'messages') return undefined;
  const { costing } = s.producer;
  return new RunEta({
    redis: costing.redis,
    names: costing.names,
    priority: resolvePriority(s.priority),
    headroom: () => costing.headroom,
  });
}

function settingsOf(o: BatchSummarizeOptions): RunSettings {
  return {
    producer: o.producer,
    model: o.model ?? 'claude-haiku-4-5',
    maxTokens: o.maxTokens ?? 512,
    prompt: o.prompt ?? DEFAULT_SUMMARY_PROMPT,
    cachePrompt: o.cachePrompt ?? true,
    priority: resolvePriority(o.priority ?? 'batch'),
    tenant: o.tenant,
    wait: o.wait ?? true,
    via: o.via ?? 'messages',
    chunkTokens: o.chunkTokens,
    retryFailed: o.retryFailed ?? false,
    deadlineAt: o.deadlineAt,
    signal: o.signal,
    onLine: o.onLine,
  };
}

function reportOf(
  run: BatchRun,
  files: number,
  started: number,
  interrupted: boolean,
  via: Via,
): BatchReport {
  const total = files - run.empty.length;
  const resolved = run.succeeded + run.failed.length + run.refused.length;
  return {
    files,
    skipped: run.skipped,
    enqueued: run.enqueued,
    reattached: run.reattached,
    succeeded: run.succeeded,
    failed: run.failed,
    refused: run.refused,
    pending: total - resolved,
    empty: run.empty,
    split: run.split,
    inputTokens: run.inputTokens,
    outputTokens: run.outputTokens,
    elapsedMs: Date.now() - started,
    interrupted,
    via,
    savedUsd: run.savedUsd,
    exitCode: interrupted ? 130 : run.failed.length + run.refused.length > 0 ? 1 : 0,
  };
}

/** The one-line summary of a run. */
export function reportLine(r: BatchReport, waited = true): string {
  const parts = [
    `${r.files} file(s)`,
    `${r.succeeded} summarized`,
    `${r.refused.length} refused`,
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
