import { Batcher } from '../shared/batcher.ts';
import type { Cost } from '../shared/estimate.ts';
import type { EstimateLearning, Settle } from '../shared/estimate-learning.ts';
import type { JobData, PdfPages } from '../shared/job.ts';
import { PDF_PAGE_TOKENS } from '../shared/media-estimate.ts';
import type { PageCosts } from '../shared/page-costs.ts';
import type { MessagesRequest } from '../shared/request.ts';

/** How long a settle's record waits for others (as the settles themselves do). */
const GATHER_MS = 5;

/** A job as far as its cost goes. */
interface Costed {
  readonly cost: Cost;
  readonly model: string;
  readonly counted: boolean;
  readonly pdfPages?: PdfPages | undefined;
}

/** What the provider counted for a call (its `usage`). */
export interface CountedInput {
  readonly input_tokens: number;
  readonly cache_creation_input_tokens?: number | null | undefined;
  readonly cache_read_input_tokens?: number | null | undefined;
}

/**
 * What the gate reserves for a job's input. A count from count_tokens as is. A request with PDF
 * pages: its text as estimated, and each page at what the fleet learned a page costs
 * (shared/page-costs.ts), never above what the producer reserved it at. Any other: its estimate
 * scaled by the ratio the fleet learned for its model and the estimate's size band (the
 * provider's count / llmq's estimate, a high quantile). Both cached up to a second. Output stays
 * at max_tokens: the provider checks it at admission. Without learning, the estimate as is.
 */
export class LearnedCosts {
  /** Settles gathered per model for a few ms: one command for those that end together. */
  private readonly batches = new Map<string, Batcher<Settle, void>>();

  constructor(
    private readonly learning: EstimateLearning | undefined,
    private readonly pages?: PageCosts | undefined,
  ) {}

  /** The jobs with the cost to reserve for each (reads what is learned, older than the cache). */
  async scale<T extends Costed>(jobs: readonly T[]): Promise<T[]> {
    if (!this.learning) return [...jobs];
    const learning = this.learning;
    const pages = this.pages;
    const banded = new Set(jobs.filter((j) => !j.counted && !j.pdfPages).map((j) => j.model));
    const paged = new Set(jobs.filter((j) => !j.counted && j.pdfPages).map((j) => j.model));
    // What cannot be read now is what was read last: the learning is an optimisation.
    await Promise.all([
      ...[...banded].map((m) => learning.bands(m).catch(() => undefined)),
      ...[...paged].map((m) => pages?.read(m).catch(() => undefined)),
    ]);
    return jobs.map((j) => ({ ...j, cost: this.costOf(j) }));
  }

  /** The cost to reserve, with what was read last (the band of the unscaled estimate). */
  costOf(j: Costed): Cost {
    if (!this.learning || j.counted) return j.cost;
    if (j.pdfPages) return { ...j.cost, inputTokens: this.pagedInput(j, j.pdfPages) };
    const ratio = this.learning.cachedRatio(j.model, j.cost.inputTokens);
    return { ...j.cost, inputTokens: Math.max(1, Math.ceil(j.cost.inputTokens * ratio - 1e-9)) };
  }

  /** {@link costOf} for a job's data. */
  costOfData(data: JobData): Cost {
    return this.costOf(costed(data));
  }

  /**
   * Learns from a settled call: a request with PDF pages, what a page cost; any other, the
   * estimate (unscaled) against the provider's count (the whole prompt: cache reads included).
   */
  async record(data: JobData, usage: CountedInput): Promise<void> {
    const whole =
      usage.input_tokens +
      (usage.cache_creation_input_tokens ?? 0) +
      (usage.cache_read_input_tokens ?? 0);
    const model = data.request.model;
    if (data.pdfPages) {
      await this.pages?.record(model, [
        { tokens: pagesShare(data.request, usage, whole), pages: data.pdfPages.pages },
      ]);
      return;
    }
    const learning = this.learning;
    if (!learning || data.inputCounted) return;
    let b = this.batches.get(model);
    if (!b) {
      b = new Batcher<Settle, void>(
        async (settles) => {
          await learning.recordMany(model, settles);
          return [];
        },
        { delayMs: GATHER_MS },
      );
      this.batches.set(model, b);
    }
    await b.push({ estimate: data.cost.inputTokens, actual: whole });
  }

  /** A paged job's input: its text as estimated, its pages at the least of both figures. */
  private pagedInput(j: Costed, p: PdfPages): number {
    const text = Math.max(0, j.cost.inputTokens - p.pages * PDF_PAGE_TOKENS);
    const learned = this.pages?.cached(j.model).perPage ?? PDF_PAGE_TOKENS;
    return Math.max(1, text + p.pages * Math.min(p.perPage, learned));
  }
}

/**
 * The tokens counted for a request's pages: the whole prompt, or, when a cached prefix ends
 * before the messages (a cached system prompt), what was counted after it, where the PDF is.
 */
function pagesShare(request: MessagesRequest, usage: CountedInput, whole: number): number {
  const cached = (usage.cache_creation_input_tokens ?? 0) + (usage.cache_read_input_tokens ?? 0);
  return cached > 0 && !marksMessages(request) ? usage.input_tokens : whole;
}

/** Whether a block of the messages marks a cache breakpoint (the prefix may hold a PDF). */
function marksMessages(request: MessagesRequest): boolean {
  return request.messages.some(
    (m) =>
      typeof m.content !== 'string' &&
      m.content.some((b) => (b as { cache_control?: unknown }).cache_control != null),
  );
}

const costed = (data: JobData): Costed => ({
  cost: data.cost,
  model: data.request.model,
  counted: data.inputCounted === true,
  pdfPages: data.pdfPages,
});
