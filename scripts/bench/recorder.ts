import { countMockTokens, type InputCounting } from '../../testing/mock-anthropic/index.ts';
import type { Accounting } from './budget.ts';

/**
 * One call the provider admitted (a 200), as a client saw it: when it was sent (the mock admits on
 * arrival, so within a millisecond or two of this), what the mock charged for input and
 * max_tokens, and the output it produced (read from the response when `output` is recorded).
 */
export interface AdmittedCall {
  readonly at: number;
  /** The first 12 characters of the first message: which request it was. */
  readonly key: string;
  /** As the mock's tokenizer counts it; as the response says when output is recorded. */
  input: number;
  readonly maxTokens: number;
  output: number | undefined;
  /** When the response's body had been read (recorded with `output`). */
  endedAt?: number | undefined;
}

/** What a recorder saw: attempts, statuses, and (in `full` mode) every admitted call. */
export interface RecorderReport {
  readonly attempts: number;
  /** By status as a string (`200`, `429`); `error` for a request that got no response. */
  readonly statuses: Record<string, number>;
  readonly admitted: readonly AdmittedCall[];
}

export interface RecorderOptions {
  /**
   * `counts` keeps only attempts and statuses (cheap, for the throughput scenarios); `full` also
   * keeps every admitted call with its charge and, when `output` is set, its output tokens.
   * @default 'full'
   */
  readonly mode?: 'counts' | 'full';
  /** Read each 200's body for its output tokens (for `actual` and `produced`). @default false */
  readonly output?: boolean;
  /** How the mock counts input (until the response says). @default the mock's tokenizer */
  readonly counting?: InputCounting | undefined;
}

const OUTPUT_TOKENS = /"output_tokens"\s*:\s*(\d+)/g;
const INPUT_TOKENS = /"input_tokens"\s*:\s*(\d+)/;

/**
 * A `fetch` for the SDK's `fetch` option that watches the Messages calls a client makes, so the
 * bench can count attempts and 429s per client and place each admission in time, without
 * touching the client's behaviour (the request and response pass through untouched).
 */
export class CallRecorder {
  private attempts = 0;
  private readonly statuses: Record<string, number> = {};
  private readonly admitted: AdmittedCall[] = [];
  private readonly pending = new Set<Promise<void>>();
  private readonly mode: 'counts' | 'full';
  private readonly withOutput: boolean;
  private readonly counting: InputCounting;

  constructor(options: RecorderOptions = {}) {
    this.mode = options.mode ?? 'full';
    this.withOutput = options.output ?? false;
    this.counting = options.counting ?? {};
  }

  readonly fetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
    if (!/\/v1\/messages(\?|$)/.test(url)) return fetch(input, init);
    this.attempts++;
    const at = Date.now();
    let response: Response;
    try {
      response = await fetch(input, init);
    } catch (err) {
      this.bump('error');
      throw err;
    }
    this.bump(String(response.status));
    if (response.status === 200 && this.mode === 'full') this.admit(at, init?.body, response);
    return response;
  };

  private bump(key: string): void {
    this.statuses[key] = (this.statuses[key] ?? 0) + 1;
  }

  private admit(at: number, body: unknown, response: Response): void {
    if (typeof body !== 'string') return;
    let request: { max_tokens?: number; messages?: { content?: unknown }[] };
    let input: number;
    try {
      request = JSON.parse(body) as typeof request;
      input = countMockTokens(request, this.counting);
    } catch {
      return;
    }
    const content = request.messages?.[0]?.content;
    const key = typeof content === 'string' ? content.slice(0, 12) : '';
    const call: AdmittedCall = {
      at,
      key,
      input,
      maxTokens: request.max_tokens ?? 0,
      output: undefined,
    };
    this.admitted.push(call);
    if (!this.withOutput) return;
    // A tee of the body: the client reads its own copy as if nothing happened.
    const read = response
      .clone()
      .text()
      .then((text) => {
        let last: string | undefined;
        for (const m of text.matchAll(OUTPUT_TOKENS)) last = m[1];
        if (last !== undefined) call.output = Number(last);
        // The provider's own count, whatever counter it uses.
        const input = INPUT_TOKENS.exec(text)?.[1];
        if (input !== undefined) call.input = Number(input);
        call.endedAt = Date.now();
      })
      .catch(() => {})
      .finally(() => this.pending.delete(read));
    this.pending.add(read);
  }

  /** Waits for the bodies still being read, then reports. */
  async report(): Promise<RecorderReport> {
    await Promise.all([...this.pending]);
    return {
      attempts: this.attempts,
      statuses: { ...this.statuses },
      admitted: [...this.admitted],
    };
  }
}

/** Adds reports together (several worker processes make one client). */
export function mergeReports(reports: readonly RecorderReport[]): RecorderReport {
  const statuses: Record<string, number> = {};
  let attempts = 0;
  const admitted: AdmittedCall[] = [];
  for (const r of reports) {
    attempts += r.attempts;
    for (const [k, v] of Object.entries(r.statuses)) statuses[k] = (statuses[k] ?? 0) + v;
    admitted.push(...r.admitted);
  }
  admitted.sort((a, b) => a.at - b.at);
  return { attempts, statuses, admitted };
}

/**
 * What a call stays charged at the provider: input plus max_tokens (`reserve`), or plus the
 * actual output (`actual`, and `produced`, where the output is charged as it comes).
 */
export function chargeOf(call: AdmittedCall, accounting: Accounting): number {
  const output = accounting === 'reserve' ? call.maxTokens : (call.output ?? call.maxTokens);
  return call.input + output;
}
