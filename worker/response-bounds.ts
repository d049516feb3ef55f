/**
 * Bounds on a provider's silences (docs/deployments.md, "A provider that goes silent"): the wait
 * for a call's first byte, and the silence between two reads once its answer began (settings in
 * shared/response-timeouts.ts). A silence past them is a provider (or a load balancer) that
 * hangs: the call is aborted rather than left holding its slot until the per-call timeout.
 */
import type { Middleware } from '@anthropic-ai/sdk/core/middleware';
import { formatSpan } from '../shared/duration.ts';
import {
  DEFAULT_FIRST_BYTE_MS,
  DEFAULT_IDLE_MS,
  PREFILL_TOKENS_PER_S,
  type ResponseTimeouts,
} from '../shared/response-timeouts.ts';

export type { ResponseTimeouts };

/**
 * Output tokens a second a plain call's answer is produced at, at the least: the SDK's own
 * allowance for a call that does not stream (an hour for 128,000 tokens).
 */
const PLAIN_OUTPUT_TOKENS_PER_S = 128_000 / 3_600;

/**
 * One call's bounds on the provider's silence, in ms: until its first byte, then between reads.
 * @inline
 */
export interface CallBounds {
  readonly firstByteMs: number;
  readonly idleMs: number;
}

/** What a call's bounds depend on: its input (estimated), its `max_tokens`, whether it streams. */
export interface CallSize {
  readonly inputTokens: number;
  readonly maxTokens: number;
  readonly stream: boolean;
}

/** The bounds of one call: the first byte's scaled with its input (and a plain call's output). */
export function boundsFor(t: ResponseTimeouts, call: CallSize): CallBounds {
  const prefillMs = (1_000 * Math.max(0, call.inputTokens)) / PREFILL_TOKENS_PER_S;
  const outputMs = call.stream ? 0 : (1_000 * call.maxTokens) / PLAIN_OUTPUT_TOKENS_PER_S;
  return {
    firstByteMs: Math.ceil((t.firstByteMs ?? DEFAULT_FIRST_BYTE_MS) + prefillMs + outputMs),
    idleMs: t.idleMs ?? DEFAULT_IDLE_MS,
  };
}

/**
 * A bound's timer that fires this much later than it was due says this process, not the
 * provider, was silent (stopped, or its event loop stalled): what the provider sent meanwhile
 * waits in the socket, so the call gets {@link LATE_GRACE_MS} to read it before it is judged.
 */
const LATE_MS = 1_000;
const LATE_GRACE_MS = 200;

/** Which bound a silent call passed. */
export type SilencePhase = 'first_byte' | 'idle';

/**
 * A call aborted because the provider stayed silent past a bound: a failure of the provider (its
 * breaker counts it), retried by time; the provider may have admitted it, so it stays charged.
 */
export class ResponseTimeoutError extends Error {
  constructor(
    readonly phase: SilencePhase,
    readonly boundMs: number,
  ) {
    super(
      phase === 'first_byte'
        ? `no first byte within ${formatSpan(boundMs)}: the provider accepted the call and stayed silent`
        : `the answer went silent for ${formatSpan(boundMs)} midway`,
    );
    this.name = 'ResponseTimeoutError';
  }
}

/**
 * Watches one call: armed for its first byte when made, then for each silence between reads.
 * Its `signal` aborts the call when a bound passes (or when `outer` aborts); its `middleware`,
 * given to the SDK with the request, sees the response's headers and every chunk of its body
 * (a stream's `ping` events too, which the SDK's parser skips).
 */
export class ResponseWatch {
  readonly signal: AbortSignal;
  private readonly controller = new AbortController();
  private timer: NodeJS.Timeout | undefined;
  /** When the armed timer is due (performance.now()). */
  private due = 0;
  /** When the call was last heard from (performance.now()), once its first byte came. */
  private lastHeard: number | undefined;
  private passed: ResponseTimeoutError | undefined;

  constructor(
    private readonly bounds: CallBounds,
    outer?: AbortSignal,
  ) {
    this.signal = outer ? AbortSignal.any([outer, this.controller.signal]) : this.controller.signal;
    this.arm(bounds.firstByteMs, 'first_byte');
  }

  /** For the SDK's request options: a plain call's headers are its first byte; then each chunk. */
  readonly middleware: Middleware = async (request, next, ctx) => {
    const response = await next(request);
    if (!ctx.options?.stream) this.heard();
    if (!response.body) return response;
    const heard = () => this.heard();
    const body = response.body.pipeThrough(
      new TransformStream<Uint8Array, Uint8Array>({
        transform(chunk, out) {
          heard();
          out.enqueue(chunk);
        },
      }),
    );
    return new Response(body, response);
  };

  /** The error a failed call ends with: the bound's, when one passed. */
  errorOf(err: unknown): unknown {
    return this.passed ?? err;
  }

  /** The call ended: no bound is watched any more. */
  end(): void {
    clearTimeout(this.timer);
  }

  /** Bytes came: the silence bound starts again (a timer is re-armed only when it fires). */
  private heard(): void {
    const first = this.lastHeard === undefined;
    this.lastHeard = performance.now();
    if (first) this.arm(this.bounds.idleMs, 'idle');
  }

  private arm(ms: number, phase: SilencePhase): void {
    clearTimeout(this.timer);
    this.due = performance.now() + ms;
    this.timer = setTimeout(() => this.check(phase, ms), ms);
    this.timer.unref();
  }

  /** A bound's timer fired: the call is aborted, unless it was heard from since it was armed. */
  private check(phase: SilencePhase, ms: number): void {
    if (performance.now() - this.due > LATE_MS) {
      // The process was stalled: read what came meanwhile first (the idle bound re-checks).
      this.timer = setTimeout(() => this.check(phase, ms), LATE_GRACE_MS);
      this.due = performance.now() + LATE_GRACE_MS;
      this.timer.unref();
      return;
    }
    const silentMs = this.lastHeard === undefined ? ms : performance.now() - this.lastHeard;
    if (phase === 'idle' && silentMs < this.bounds.idleMs) {
      this.arm(this.bounds.idleMs - silentMs, 'idle');
      return;
    }
    if (phase === 'first_byte' && this.lastHeard !== undefined) return;
    this.passed = new ResponseTimeoutError(phase, phase === 'idle' ? this.bounds.idleMs : ms);
    this.controller.abort(this.passed);
  }
}
