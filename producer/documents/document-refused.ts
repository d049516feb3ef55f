import { RequestValidationError } from '../../shared/errors.ts';

/**
 * A document that cannot be sent as it is (an encrypted PDF, one that cannot be parsed, a page
 * too large for any call): nothing was enqueued. `reason` says why and what to do.
 *
 * @example
 * ```ts
 * try {
 *   await producer.enqueueDocument({ pdf: bytes });
 * } catch (err) {
 *   if (err instanceof DocumentRefusedError) console.error(err.reason);
 * }
 * ```
 */
export class DocumentRefusedError extends RequestValidationError {
  readonly reason: string;
  /** @internal */
  constructor(reason: string) {
    super([{ field: 'document', message: reason }], 'the document cannot be sent');
    this.reason = reason;
  }
}
