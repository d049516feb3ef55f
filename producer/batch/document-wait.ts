import type { Via } from '../../shared/batch-via.ts';
import type { JobResult } from '../../shared/job.ts';
import { batchSavingUsd } from '../../shared/prices.ts';
import { JobFailedError } from '../errors.ts';
import type { EnqueuedFlow } from '../flows.ts';
import type { Producer } from '../producer.ts';

/** A split document's outcome: the final answer, and the usage of every call it took. */
export interface DocumentResult {
  readonly result: JobResult;
  readonly parts: number;
  readonly usage: { input_tokens: number; output_tokens: number };
  /** What the parts that went through Message Batches saved, in dollars. */
  readonly savedUsd: number;
}

/**
 * Waits for a split document: resolves with its combine job's result and the usage of all its
 * calls; rejects with a {@link JobFailedError} naming the part when a part was dead-lettered
 * (the combine job then waits; `llmq dlq retry` of the part lets it finish).
 */
export async function waitForDocument(
  producer: Producer,
  flow: EnqueuedFlow,
  options: {
    readonly via: Via;
    readonly signal?: AbortSignal | undefined;
    /** Called as each part completes, with its result. */
    readonly onPart?: ((result: JobResult) => void) | undefined;
  },
): Promise<DocumentResult> {
  const n = flow.partIds.length;
  const done = new AbortController();
  const signal = options.signal ? AbortSignal.any([done.signal, options.signal]) : done.signal;
  const partFailed = new Promise<never>((_, reject) => {
    flow.partIds.forEach((id, i) => {
      producer
        .waitForResult(id, { via: options.via, signal })
        .then(options.onPart, (err: unknown) => {
          if (err instanceof JobFailedError)
            reject(new JobFailedError(id, `part ${i + 1} of ${n}: ${err.reason}`, err.deadLetter));
        });
    });
  });
  try {
    const result = await Promise.race([producer.waitForResult(flow.id, { signal }), partFailed]);
    // The parts' answers stay with the combine job (BullMQ keeps its children's values).
    const job = await producer.queue.getJob(flow.id);
    const parts = Object.values((await job?.getChildrenValues<JobResult>()) ?? {});
    const usage = { ...pick(result) };
    let savedUsd = 0;
    for (const r of parts) {
      const u = pick(r);
      usage.input_tokens += u.input_tokens;
      usage.output_tokens += u.output_tokens;
      if (r.batchId) savedUsd += batchSavingUsd(r.message.model, u);
    }
    return { result, parts: n, usage, savedUsd };
  } finally {
    done.abort();
  }
}

function pick(r: JobResult): { input_tokens: number; output_tokens: number } {
  return {
    input_tokens: r.message.usage.input_tokens,
    output_tokens: r.message.usage.output_tokens,
  };
}
