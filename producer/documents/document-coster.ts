import type { PageCosts } from '../../shared/page-costs.ts';
import type { MessagesRequest } from '../../shared/request.ts';
import type { CountTokensBudget } from '../count-tokens-budget.ts';
import { countParams } from '../job-builder.ts';
import type { TokenCounter } from '../producer-options.ts';
import { DocumentRefusedError } from './document-refused.ts';

/**
 * The provider's own count of a request's input (`count_tokens`), taken where a guess would
 * decide something (see docs/limits-and-budgets.md), within the fleet's shared budget for it:
 * when the budget is spent this minute, or there is no client to count with, the guess stands.
 * Each count of a request with PDF pages teaches the fleet what a page costs.
 */
export class DocumentCoster {
  constructor(
    private readonly o: {
      readonly counter: TokenCounter | undefined;
      readonly budget: CountTokensBudget;
      readonly pageCosts: PageCosts;
    },
  ) {}

  /**
   * The provider's count of `request`, or undefined when it cannot be had now (no client, the
   * budget spent, the provider not answering). A request the provider refuses to count (400: a
   * PDF it cannot read) is a {@link DocumentRefusedError} with its message.
   */
  async count(
    request: MessagesRequest,
    p: { readonly tenant: string | undefined; readonly pdfPages: number },
  ): Promise<number | undefined> {
    const counter = this.o.counter;
    if (!counter) return undefined;
    if (!(await this.o.budget.take(p.tenant ?? '')).ok) return undefined;
    let tokens: number;
    try {
      const answer = await counter.messages.countTokens(countParams(request) as never);
      tokens = answer.input_tokens;
    } catch (err) {
      const { status, message } = err as { status?: unknown; message?: string };
      if (status === 400) throw new DocumentRefusedError(`the provider refuses it: ${message}`);
      return undefined;
    }
    if (p.pdfPages > 0)
      await this.o.pageCosts
        .record(request.model, [{ tokens, pages: p.pdfPages }])
        .catch(() => undefined);
    return tokens;
  }
}
