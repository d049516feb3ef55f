/**
 * How long a provider may stay silent (docs/deployments.md, "A provider that goes silent"): the
 * settings; worker/response-bounds.ts applies them to each call.
 */

/**
 * How long a call may stay silent, for a worker or one deployment of its pool.
 * @inline
 */
export interface ResponseTimeouts {
  /**
   * The wait for a call's first byte, for a small request: a stream's first event, a plain
   * call's headers (which come with its whole answer, so its `max_tokens` adds to it). A large
   * input adds a second per {@link PREFILL_TOKENS_PER_S} tokens. @default 20_000
   */
  readonly firstByteMs?: number | undefined;
  /** The longest silence between two reads of an answer that began. @default 30_000 */
  readonly idleMs?: number | undefined;
}

/**
 * The API's first byte comes within seconds for most requests: 20 s is several times that, short
 * enough that a silent provider holds a slot for seconds rather than the SDK's 10 minutes.
 */
export const DEFAULT_FIRST_BYTE_MS = 20_000;

/** A stream sends `ping` events while it works: 30 s of nothing is not a slow answer. */
export const DEFAULT_IDLE_MS = 30_000;

/** Input tokens a second the provider reads at the least before it answers (its prefill). */
export const PREFILL_TOKENS_PER_S = 4_000;
