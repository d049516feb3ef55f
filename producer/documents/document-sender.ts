import type { Costing } from '../costing.ts';
import { CountTokensBudget } from '../count-tokens-budget.ts';
import type { TokenCounter } from '../producer-options.ts';
import { DocumentCoster } from './document-coster.ts';
import {
  type DocumentOptions,
  type DocumentQueue,
  type DocumentSource,
  type EnqueuedDocument,
  enqueueDocument,
} from './enqueue-document.ts';

/**
 * What a producer needs to send documents, made on its first one (the producer imports this
 * module then: most producers send none, and pdf-lib is not small).
 */
export class DocumentSender {
  private readonly coster: DocumentCoster;

  constructor(o: {
    /** The producer's: its connection, its queue, what a page costs. */
    readonly costing: Costing;
    readonly counter: TokenCounter | undefined;
    /** count_tokens calls a minute for the queue's producers and servers together. */
    readonly countTokensRpm: number | undefined;
  }) {
    const { redis, names, pageCosts } = o.costing;
    const budget = new CountTokensBudget({ redis, names, rpm: o.countTokensRpm });
    this.coster = new DocumentCoster({ counter: o.counter, budget, pageCosts });
  }

  send(
    q: DocumentQueue,
    source: DocumentSource,
    options: DocumentOptions,
  ): Promise<EnqueuedDocument> {
    return enqueueDocument(q, this.coster, source, options);
  }
}
