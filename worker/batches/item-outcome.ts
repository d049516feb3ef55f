import Anthropic from '@anthropic-ai/sdk';
import type { AttemptRecord } from '../../shared/job.ts';
import { type Classified, classifyProviderError } from '../classify.ts';

/** One line of a batch's results, as the SDK yields it. */
export type BatchItem = Anthropic.Messages.MessageBatchIndividualResponse;

/** What to do with a batch-bound job once its item came back. */
export type ItemOutcome =
  | { readonly kind: 'complete'; readonly message: Anthropic.Message }
  | { readonly kind: 'retry'; readonly cause: Classified; readonly record: AttemptRecord }
  | { readonly kind: 'dead'; readonly cause: Classified; readonly record: AttemptRecord };

const STATUS: Readonly<Record<string, number>> = {
  invalid_request_error: 400,
  authentication_error: 401,
  billing_error: 402,
  permission_error: 403,
  not_found_error: 404,
  request_too_large: 413,
  rate_limit_error: 429,
  api_error: 500,
  overloaded_error: 529,
};

/**
 * Decides, without Redis, what an item's result means for its job: `succeeded` completes it;
 * `errored` is classified as the worker classifies a failed call (a retryable error goes back,
 * a final one is dead-lettered with the provider's reason; a rate limit inside a batch is
 * retryable); `expired` goes back; `canceled` is dead-lettered (reported, not retried).
 * A retry past the job's attempts is dead-lettered too.
 */
export function itemOutcome(
  item: BatchItem,
  attemptsUsed: number,
  attemptsAllowed: number,
  now: number,
): ItemOutcome {
  const r = item.result;
  if (r.type === 'succeeded') return { kind: 'complete', message: r.message };
  let cause: Classified;
  if (r.type === 'errored') {
    const body = r.error as unknown as { error?: { type?: string; message?: string } };
    const type = body.error?.type ?? 'api_error';
    const err = Anthropic.APIError.generate(
      STATUS[type] ?? 500,
      body,
      body.error?.message,
      new Headers(),
    );
    cause = classifyProviderError(err);
    if (
      cause.kind === 'rate_limited' ||
      (cause.status === 429 && !/^spend limit/.test(cause.reason))
    )
      cause = { ...cause, kind: 'retryable' };
  } else if (r.type === 'expired') {
    cause = {
      kind: 'retryable',
      reason: 'the batch expired before this request was processed',
      errorClass: 'BatchExpired',
      maybeCharged: false,
    };
  } else {
    cause = {
      kind: 'final',
      reason: 'the batch was canceled before this request was processed',
      errorClass: 'BatchCanceled',
      maybeCharged: false,
    };
  }
  const record: AttemptRecord = {
    at: now,
    outcome: cause.kind === 'final' ? 'final' : 'retryable',
    status: cause.status,
    errorClass: cause.errorClass,
    message: cause.reason,
    counted: true,
  };
  if (cause.kind === 'final') return { kind: 'dead', cause, record };
  const used = attemptsUsed + 1;
  if (used >= attemptsAllowed) {
    const reason = `gave up after ${used} attempt${used === 1 ? '' : 's'}: ${cause.reason}`;
    return { kind: 'dead', cause: { ...cause, reason }, record };
  }
  return { kind: 'retry', cause, record };
}
