/**
 * One `llmq batch summarize` run, file by file: decide from the out file whether a file is done,
 * enqueue it as a document (one job, or its parts and a combine job), and collect its result as
 * one JSONL line. The counts it keeps make the run's progress and report.
 */
import type { Via } from '../../shared/batch-via.ts';
import { answerText } from '../../shared/combine.ts';
import { LlmqError, RedisUnavailableError } from '../../shared/errors.ts';
import type { JobResult } from '../../shared/job.ts';
import { batchSavingUsd } from '../../shared/prices.ts';
import type { PriorityLane } from '../../shared/priority.ts';
import { DocumentRefusedError } from '../documents/document-refused.ts';
import type { DocumentSource, EnqueuedDocument } from '../documents/enqueue-document.ts';
import { JobFailedError, JobNotFoundError } from '../errors.ts';
import { jobIdForKey } from '../idempotency.ts';
import type { Producer } from '../producer.ts';
import { waitForDocument } from './document-wait.ts';
import { type FileContent, readFileContent } from './file-content.ts';
import type { Progress, ProgressState } from './progress.ts';
import type { ResultLine, ResultsFile } from './results-file.ts';
import type { RunEta } from './run-eta.ts';
import { decide, idempotencyKey } from './run-keys.ts';

/** A run's settings, defaults filled in. */
export interface RunSettings {
  readonly producer: Producer;
  readonly model: string;
  readonly maxTokens: number;
  readonly prompt: string;
  /** Mark the prompt for the API's prompt cache when it is long enough. */
  readonly cachePrompt: boolean;
  readonly priority: PriorityLane | number | string;
  readonly tenant: string | undefined;
  readonly wait: boolean;
  readonly via: Via;
  readonly chunkTokens: number | undefined;
  readonly retryFailed: boolean;
  readonly deadlineAt: number | undefined;
  readonly signal: AbortSignal | undefined;
  readonly onLine: ((line: ResultLine) => void) | undefined;
}

/** A file that has no result yet: its key, and its size (the smallest goes first when needed). */
interface Todo {
  readonly file: string;
  readonly key: string;
  readonly bytes: number;
}

/** A file's calls: one, or a document's parts and its combine call; and those done. */
interface Calls {
  total: number;
  done: number;
}

/** How often the run looks for the provider's first reading while its first file runs. */
const READING_POLL_MS = 250;

/** What became of one file: `next` (nothing more to show), `shown` (update progress), `stop`. */
export type FileStep = 'next' | 'shown' | 'stop';

export class BatchRun {
  readonly failed: { file: string; id: string | null; error: string }[] = [];
  readonly refused: { file: string; id: string; reason: string }[] = [];
  readonly empty: string[] = [];
  succeeded = 0;
  skipped = 0;
  enqueued = 0;
  reattached = 0;
  inputTokens = 0;
  outputTokens = 0;
  savedUsd = 0;
  /** Files summarized in parts (this run or an earlier one). */
  split = 0;
  /** The files with no result yet, in order, once surveyed. */
  private todo: Todo[] = [];
  private readonly calls = new Map<string, Calls>();
  /** What earlier runs wrote, by file: a line counts for the file's current content only. */
  private readonly earlier = new Map<string, ResultLine[]>();
  /** Each wait settles quietly; the first unexpected error (Redis gone) is thrown at the end. */
  private readonly waits: Promise<void>[] = [];
  private unexpected: unknown;
  private notedBatches = false;

  constructor(
    private readonly s: RunSettings,
    private readonly files: readonly string[],
    private readonly results: ResultsFile,
    private readonly progress: Progress,
    private readonly eta: RunEta | undefined,
  ) {
    for (const line of results.existing) {
      const list = this.earlier.get(line.file) ?? [];
      list.push(line);
      this.earlier.set(line.file, list);
    }
  }

  /** What the progress display shows now. */
  state(): ProgressState {
    let calls = 0;
    let callsDone = 0;
    for (const c of this.calls.values()) {
      calls += c.total;
      callsDone += Math.min(c.done, c.total);
    }
    return {
      files: this.files.length - this.empty.length,
      succeeded: this.succeeded,
      refused: this.refused.length,
      failed: this.failed.length,
      calls,
      callsDone,
      tokens: this.inputTokens + this.outputTokens,
      etaMs: this.eta?.etaMs(),
    };
  }

  /**
   * Reads every file once and decides from the out file which are done (a summary, a refusal,
   * a dead letter) before anything is shown, so the first progress line is true.
   */
  async survey(): Promise<void> {
    for (const file of this.files) {
      if (this.s.signal?.aborted) return;
      const content = await readFileContent(file);
      if (content.kind === 'empty') {
        this.empty.push(file);
        continue;
      }
      const { model, maxTokens, prompt, tenant, chunkTokens } = this.s;
      const text = content.kind === 'text' ? content.text : content.fingerprint;
      const baseKey = idempotencyKey({ model, maxTokens, prompt, text, chunkTokens });
      const decided = decide(baseKey, this.earlier.get(file) ?? [], tenant, this.s.retryFailed);
      if (decided.kind === 'enqueue') {
        this.todo.push({ file, key: decided.key, bytes: bytesOf(content) });
        this.calls.set(file, { total: 1, done: 0 });
        continue;
      }
      this.skipped++;
      this.count(decided.line);
    }
  }

  /**
   * Enqueues the files without a result, collecting each (unless `wait` is off). With no limit
   * known yet (none configured, no reading from the provider), the smallest file goes first,
   * alone, and the others are planned once its answer has brought the provider's limits.
   */
  async enqueueAll(): Promise<void> {
    let order = this.todo;
    if (this.s.via === 'messages' && !(await this.limitsKnown()) && order.length > 1) {
      const first = order.reduce((a, b) => (b.bytes < a.bytes ? b : a));
      this.progress.note(
        `no input limit known yet (none configured, no reading from the provider): ${first.file} goes first, the others once its answer brings the provider's limits`,
      );
      const step = await this.file(first, true);
      if (step === 'stop') return;
      await this.firstReading();
      order = order.filter((t) => t !== first);
    }
    for (const t of order) {
      if (this.s.signal?.aborted) break;
      if ((await this.file(t)) === 'stop') break;
    }
  }

  /** Waits for every result collected; throws the first unexpected error among them. */
  async settled(): Promise<void> {
    if (this.s.wait) await Promise.all(this.waits);
    await this.eta?.settled();
    if (this.unexpected !== undefined) throw this.unexpected;
  }

  /** One file: refused with a line, or enqueued (and collected). */
  private async file(t: Todo, alwaysCollect = false): Promise<FileStep> {
    const content = await readFileContent(t.file);
    const id = jobIdForKey(t.key, this.s.tenant);
    if (content.kind === 'invalid') {
      this.write({ file: t.file, id, refused: content.reason });
      return 'next';
    }
    if (content.kind === 'empty') return 'next'; // Emptied since the survey: nothing to send.
    try {
      const doc = await this.s.producer.enqueueDocument(sourceOf(content), this.documentOptions(t));
      if (doc.created) this.enqueued++;
      else this.reattached++;
      this.calls.set(t.file, { total: doc.parts > 1 ? doc.parts + 1 : 1, done: 0 });
      if (doc.parts > 1) this.noteBatches();
      if (this.s.wait || alwaysCollect) this.collect(t.file, doc);
    } catch (err) {
      if (this.s.signal?.aborted) return 'stop';
      if (err instanceof RedisUnavailableError || !(err instanceof LlmqError)) throw err;
      // Never queued as it is (too long for a limit, a PDF that cannot be read, …): say why
      // under the id its job would have (so that an edited file is tried again), and go on.
      const reason = err instanceof DocumentRefusedError ? err.reason : err.message;
      this.write({ file: t.file, id, refused: reason });
    }
    this.progress.update(this.state());
    return 'shown';
  }

  private documentOptions(t: Todo) {
    const { model, maxTokens, prompt, cachePrompt, chunkTokens } = this.s;
    const { priority, tenant, via, deadlineAt, signal } = this.s;
    return {
      model,
      maxTokens,
      prompt,
      cachePrompt,
      ...(chunkTokens !== undefined ? { chunkTokens } : {}),
      idempotencyKey: t.key,
      priority,
      ...(tenant !== undefined ? { tenant } : {}),
      meta: { file: t.file },
      wait: true,
      via,
      ...(deadlineAt !== undefined ? { deadlineAt } : {}),
      ...(signal ? { signal } : {}),
    };
  }

  /** Whether a call's input limit is known: configured, or read from the provider. */
  private async limitsKnown(): Promise<boolean> {
    const { model, maxTokens, tenant } = this.s;
    return Number.isFinite(await this.s.producer.costing.inputRoom(model, maxTokens, tenant));
  }

  /** Until the provider's limits are read, or the first file's call has ended without them. */
  private async firstReading(): Promise<void> {
    let ended = false;
    const first = Promise.all(this.waits).finally(() => {
      ended = true;
    });
    while (!ended && !this.s.signal?.aborted && !(await this.limitsKnown()))
      await Promise.race([first, new Promise((r) => setTimeout(r, READING_POLL_MS))]);
  }

  private noteBatches(): void {
    if (this.s.via !== 'batches' || this.notedBatches) return;
    this.notedBatches = true;
    this.progress.note(
      'note: documents summarized in parts send their parts by batch and their final call through messages: a worker must run (llmq worker)',
    );
  }

  /** Counts a line (written now or by an earlier run) in the run's figures. */
  private count(line: ResultLine): void {
    if ('summary' in line) {
      this.succeeded++;
      if (line.parts !== undefined && line.parts > 1) this.split++;
    } else if ('refused' in line) {
      this.refused.push({ file: line.file, id: line.id, reason: line.refused });
    } else {
      this.failed.push({ file: line.file, id: line.id, error: line.error });
    }
    const calls = 'summary' in line && line.parts ? line.parts + 1 : 1;
    const c = this.calls.get(line.file);
    this.calls.set(line.file, {
      total: Math.max(calls, c?.total ?? 0),
      done: Number.POSITIVE_INFINITY,
    });
  }

  private write(line: ResultLine): void {
    this.results.append(line);
    this.s.onLine?.(line);
    if ('summary' in line) {
      this.inputTokens += line.usage.input_tokens;
      this.outputTokens += line.usage.output_tokens;
    }
    this.count(line);
    this.progress.update(this.state());
  }

  private failedWait(file: string, id: string) {
    return (err: unknown) => {
      if (err instanceof JobFailedError) this.write({ file, id, error: err.reason });
      // Removed meanwhile (cancelled, or its retention ran out): no line, so a rerun enqueues it again.
      else if (err instanceof JobNotFoundError)
        this.progress.note(`warning: job ${id} of ${file} was removed; rerun to summarize it`);
      else if (!this.s.signal?.aborted) this.unexpected ??= err;
    };
  }

  /** A call of `file` is done: counted, its latency noted for the ETA. */
  private called(file: string, result: JobResult): void {
    const c = this.calls.get(file);
    if (c) c.done++;
    this.eta?.called(result.latencyMs);
    this.progress.update(this.state());
  }

  private collect(file: string, doc: EnqueuedDocument): void {
    const { via, signal } = this.s;
    const id = doc.id;
    if (doc.parts <= 1 || doc.partIds.length === 0) {
      this.waits.push(
        this.s.producer.waitForResult(id, { via, ...(signal ? { signal } : {}) }).then(
          (result) => {
            if (result.batchId)
              this.savedUsd += batchSavingUsd(result.message.model, usageOf(result));
            this.eta?.called(result.latencyMs);
            this.write({ file, id, summary: answerText(result), usage: usageOf(result) });
          },
          this.failedWait(file, id),
        ),
      );
      return;
    }
    const onPart = (result: JobResult) => this.called(file, result);
    this.waits.push(
      waitForDocument(this.s.producer, doc, { via, signal, onPart }).then(
        (d) => {
          this.savedUsd += d.savedUsd;
          this.eta?.called(d.result.latencyMs);
          const summary = answerText(d.result);
          this.write({ file, id, summary, usage: d.usage, parts: d.parts });
        },
        this.failedWait(file, id),
      ),
    );
  }
}

function sourceOf(content: Exclude<FileContent, { kind: 'invalid' | 'empty' }>): DocumentSource {
  if (content.kind === 'text') return { text: content.text };
  if (content.kind === 'pdf') return { pdf: content.bytes };
  return { blocks: [content.block] };
}

function bytesOf(content: FileContent): number {
  if (content.kind === 'text') return Buffer.byteLength(content.text);
  if (content.kind === 'pdf') return content.bytes.length;
  if (content.kind === 'block') return JSON.stringify(content.block).length;
  return 0;
}

function usageOf(result: JobResult): { input_tokens: number; output_tokens: number } {
  return {
    input_tokens: result.message.usage.input_tokens,
    output_tokens: result.message.usage.output_tokens,
  };
}
