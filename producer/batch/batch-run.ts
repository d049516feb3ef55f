/**
 * One `llmq batch summarize` run, file by file: decide from the out file whether a file is done,
 * enqueue it (one job, or a map-reduce for a long document), and collect its result as one JSONL
 * line. The counts it keeps make the run's report.
 */
import type { Via } from '../../shared/batch-via.ts';
import { answerText } from '../../shared/combine.ts';
import { LlmqError, RedisUnavailableError } from '../../shared/errors.ts';
import type { JobResult } from '../../shared/job.ts';
import { batchSavingUsd } from '../../shared/prices.ts';
import type { PriorityLane } from '../../shared/priority.ts';
import { cacheableSystem } from '../../shared/prompt-cache.ts';
import { JobFailedError, JobNotFoundError } from '../errors.ts';
import type { EnqueuedFlow } from '../flows.ts';
import { jobIdForKey } from '../idempotency.ts';
import type { Producer } from '../producer.ts';
import type { FileContent } from './file-content.ts';
import { type DocumentPlan, planDocument, summaryFlow, waitForDocument } from './long-document.ts';
import type { Progress, ProgressState } from './progress.ts';
import type { ResultLine, ResultsFile } from './results-file.ts';
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

/** A file with a job: where its line goes, under which key and id. */
interface Pending {
  readonly file: string;
  readonly key: string;
  readonly id: string;
}

/** What became of one file: `next` (nothing more to show), `shown` (update progress), `stop`. */
export type FileStep = 'next' | 'shown' | 'stop';

export class BatchRun {
  readonly failed: { file: string; id: string | null; error: string }[] = [];
  readonly empty: string[] = [];
  succeeded = 0;
  skipped = 0;
  enqueued = 0;
  reattached = 0;
  inputTokens = 0;
  outputTokens = 0;
  savedUsd = 0;
  split = 0;
  private arrived = 0;
  /** What earlier runs wrote, by file: a line counts for the file's current content only. */
  private readonly earlier = new Map<string, ResultLine[]>();
  /** Each wait settles quietly; the first unexpected error (Redis gone) is thrown at the end. */
  private readonly waits: Promise<void>[] = [];
  private unexpected: unknown;

  constructor(
    private readonly s: RunSettings,
    private readonly files: readonly string[],
    private readonly results: ResultsFile,
    private readonly progress: Progress,
    private readonly startedAt: number,
  ) {
    for (const line of results.existing) {
      const list = this.earlier.get(line.file) ?? [];
      list.push(line);
      this.earlier.set(line.file, list);
    }
  }

  /** What the progress display shows now. */
  state(): ProgressState {
    return {
      total: this.files.length - this.empty.length,
      succeeded: this.succeeded,
      failed: this.failed.length,
      tokens: this.inputTokens + this.outputTokens,
      arrived: this.arrived,
      startedAt: this.startedAt,
    };
  }

  /** Waits for every result collected; throws the first unexpected error among them. */
  async settled(): Promise<void> {
    if (this.s.wait) await Promise.all(this.waits);
    if (this.unexpected !== undefined) throw this.unexpected;
  }

  /** One file: skipped, done already, refused with a line, or enqueued (and collected). */
  async file(file: string, content: FileContent, inputRoom: number | undefined): Promise<FileStep> {
    const { model, maxTokens, prompt, tenant } = this.s;
    if (content.kind === 'empty') {
      this.empty.push(file);
      return 'next';
    }
    // A PDF or an image is one block, keyed by its bytes' hash; only text is split.
    const text = content.kind === 'text' ? content.text : content.fingerprint;
    const plan: DocumentPlan =
      content.kind === 'text'
        ? planDocument(text, {
            model,
            maxTokens,
            prompt,
            chunkTokens: this.s.chunkTokens,
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
    const decided = decide(baseKey, this.earlier.get(file) ?? [], tenant, this.s.retryFailed);
    if (decided.kind === 'done') {
      this.skipped++;
      if ('summary' in decided.line) this.succeeded++;
      else this.failed.push({ file, id: decided.line.id, error: decided.line.error });
      return 'next';
    }
    if (content.kind === 'invalid') {
      this.write({ file, id: jobIdForKey(decided.key, tenant), error: content.reason });
      return 'next';
    }
    const p = { file, key: decided.key, id: jobIdForKey(decided.key, tenant) };
    try {
      if (parted) await this.enqueueParts(p, plan);
      else await this.enqueueOne(p, content.kind === 'text' ? text : [content.block]);
    } catch (err) {
      if (this.s.signal?.aborted) return 'stop';
      if (err instanceof RedisUnavailableError || !(err instanceof LlmqError)) throw err;
      // This file can never be enqueued as it is (too long for a limit, …): say so under the id
      // its job would have (so an edited file is tried again), and go on.
      this.write({ file, id: p.id, error: err.message });
    }
    return 'shown';
  }

  private enqueueOptions(p: Pending) {
    const { priority, tenant, via, deadlineAt, signal } = this.s;
    return {
      idempotencyKey: p.key,
      priority,
      ...(tenant !== undefined ? { tenant } : {}),
      meta: { file: p.file },
      wait: true,
      via,
      ...(deadlineAt !== undefined ? { deadlineAt } : {}),
      ...(signal ? { signal } : {}),
    };
  }

  private async enqueueOne(p: Pending, content: string | readonly unknown[]): Promise<void> {
    const { model, maxTokens, prompt, cachePrompt } = this.s;
    const request = {
      model,
      max_tokens: maxTokens,
      system: cachePrompt ? cacheableSystem(model, prompt) : prompt,
      messages: [{ role: 'user' as const, content }],
    };
    const job = await this.s.producer.enqueueJob(request, this.enqueueOptions(p));
    if (job.created) this.enqueued++;
    else this.reattached++;
    if (this.s.wait) this.collect({ ...p, id: job.id });
  }

  private async enqueueParts(p: Pending, plan: DocumentPlan): Promise<void> {
    const { model, maxTokens, prompt, cachePrompt, via } = this.s;
    const flow = await this.s.producer.enqueueMapReduce(
      summaryFlow(plan.parts, { model, maxTokens, prompt, cachePrompt }),
      this.enqueueOptions(p),
    );
    if (this.split++ === 0 && via === 'batches')
      this.progress.note(
        'note: documents summarized in parts send their parts by batch and their final call through messages: a worker must run (llmq worker)',
      );
    if (flow.created) this.enqueued++;
    else this.reattached++;
    if (this.s.wait) this.collectDocument({ ...p, id: flow.id }, flow);
  }

  private write(line: ResultLine): void {
    this.results.append(line);
    this.s.onLine?.(line);
    if ('summary' in line) {
      this.succeeded++;
      this.inputTokens += line.usage.input_tokens;
      this.outputTokens += line.usage.output_tokens;
    } else {
      this.failed.push({ file: line.file, id: line.id, error: line.error });
    }
    this.arrived++;
    this.progress.update(this.state());
  }

  private failedWait(p: Pending) {
    return (err: unknown) => {
      if (err instanceof JobFailedError) this.write({ file: p.file, id: p.id, error: err.reason });
      // Removed meanwhile (cancelled, or its retention ran out): no line, so a rerun enqueues it again.
      else if (err instanceof JobNotFoundError)
        this.progress.note(`warning: job ${p.id} of ${p.file} was removed; rerun to summarize it`);
      else if (!this.s.signal?.aborted) this.unexpected ??= err;
    };
  }

  private collect(p: Pending): void {
    const { via, signal } = this.s;
    this.waits.push(
      this.s.producer.waitForResult(p.id, { via, ...(signal ? { signal } : {}) }).then((result) => {
        if (result.batchId) this.savedUsd += batchSavingUsd(result.message.model, usageOf(result));
        this.write({ file: p.file, id: p.id, summary: answerText(result), usage: usageOf(result) });
      }, this.failedWait(p)),
    );
  }

  private collectDocument(p: Pending, flow: EnqueuedFlow): void {
    const { via, signal } = this.s;
    this.waits.push(
      waitForDocument(this.s.producer, flow, { via, signal }).then((d) => {
        this.savedUsd += d.savedUsd;
        const summary = answerText(d.result);
        this.write({ file: p.file, id: p.id, summary, usage: d.usage, parts: d.parts });
      }, this.failedWait(p)),
    );
  }
}

function usageOf(result: JobResult): { input_tokens: number; output_tokens: number } {
  return {
    input_tokens: result.message.usage.input_tokens,
    output_tokens: result.message.usage.output_tokens,
  };
}
