import { Batcher } from '../shared/batcher.ts';
import type { Cost } from '../shared/estimate.ts';
import type { EstimateLearning, Settle } from '../shared/estimate-learning.ts';
import type { JobData } from '../shared/job.ts';

/** How long a settle's record waits for others (as the settles themselves do). */
const GATHER_MS = 5;

/** A job as far as its cost goes. */
interface Costed {
  readonly cost: Cost;
  readonly model: string;
  readonly counted: boolean;
}

/**
 * What the gate reserves for a job: its input estimate scaled by the ratio the fleet learned
 * for its model and the estimate's size band (the provider's count / llmq's estimate, a high
 * quantile), cached up to a second; a count from count_tokens as is. Output stays at max_tokens: the provider checks it
 * at admission. Without learning, the estimate as is.
 */
export class LearnedCosts {
  /** Settles gathered per model for a few ms: one command for those that end together. */
  private readonly batches = new Map<string, Batcher<Settle, void>>();

  constructor(private readonly learning: EstimateLearning | undefined) {}

  /** The jobs with the cost to reserve for each (reads the models' bands older than the cache). */
  async scale<T extends Costed>(jobs: readonly T[]): Promise<T[]> {
    const learning = this.learning;
    if (!learning) return [...jobs];
    const models = new Set(jobs.filter((j) => !j.counted).map((j) => j.model));
    // A ratio that cannot be read now is the one read last: the learning is an optimisation.
    await Promise.all([...models].map((m) => learning.bands(m).catch(() => undefined)));
    return jobs.map((j) => ({ ...j, cost: this.costOf(j) }));
  }

  /** The cost to reserve, with the bands read last (the band of the unscaled estimate). */
  costOf(j: Costed): Cost {
    if (!this.learning || j.counted) return j.cost;
    const ratio = this.learning.cachedRatio(j.model, j.cost.inputTokens);
    return { ...j.cost, inputTokens: Math.max(1, Math.ceil(j.cost.inputTokens * ratio - 1e-9)) };
  }

  /** {@link costOf} for a job's data. */
  costOfData(data: JobData): Cost {
    return this.costOf(costed(data));
  }

  /** Learns from a settled call: the estimate (unscaled) against the provider's count. */
  async record(data: JobData, providerInput: number): Promise<void> {
    const learning = this.learning;
    if (!learning || data.inputCounted) return;
    const model = data.request.model;
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
    await b.push({ estimate: data.cost.inputTokens, actual: providerInput });
  }
}

const costed = (data: JobData): Costed => ({
  cost: data.cost,
  model: data.request.model,
  counted: data.inputCounted === true,
});
