import { Batcher } from '../batcher.ts';
import { deploymentScopeAmong } from '../deployment-scope.ts';
import { DIMENSIONS } from '../dimensions.ts';
import { type HeaderSource, readRateLimitHeaders } from '../provider-headers.ts';
import { usageError } from './options.ts';
import {
  type EndRecord,
  type EndResult,
  type LimiterScripts,
  type ReadingRecord,
  type RecordBatch,
  UNKNOWN_USAGE,
} from './scripts.ts';
import { GLOBAL_SCOPE, type OutputAccounting, type Reservation, type Usage } from './types.ts';
import type { WakeUps } from './wake.ts';

/** How long an end with usage waits for company (an acquire, or a waiter asleep here, sends it first). */
export const SETTLE_WAIT_MS = 5;

type Op =
  | { readonly kind: 'stamp'; readonly id: string; readonly ageMs: number; readonly at: number }
  | { readonly kind: 'end'; readonly end: EndRecord; readonly periods?: readonly string[] }
  | { readonly kind: 'pause'; readonly ms: number; readonly scopes: readonly string[] }
  | { readonly kind: 'reading'; readonly reading: ReadingRecord; readonly at: number };

type Answer = EndResult | number | undefined;

/** Gathers what calls tell the limiter and sends what comes together as one `record` run. */
export class Recorder {
  private readonly batcher: Batcher<Op, Answer>;

  constructor(
    private readonly scripts: LimiterScripts,
    private readonly windowMs: number,
    private readonly channel: string,
    /** Under `reserve` a settle keeps the output reserved; else it takes the output used. */
    readonly accounting: OutputAccounting,
    private readonly wakeUps: WakeUps,
    /** The clock a reading's age runs on until it is sent (tests inject the limiter's). */
    readonly clock: () => number = () => performance.now(),
  ) {
    this.batcher = new Batcher<Op, Answer>((ops) => this.send(ops), { delayMs: SETTLE_WAIT_MS });
  }

  /** One run for what came together; a second deployment's pause goes first, in a run of its own. */
  private async send(ops: readonly Op[]): Promise<Answer[]> {
    const of = <K extends Op['kind']>(k: K) =>
      ops.filter((o): o is Extract<Op, { kind: K }> => o.kind === k);
    const run = (b: Partial<RecordBatch>) =>
      this.scripts.record(b, this.windowMs, this.channel, this.accounting);
    const [first, ...others] = pausesOf(of('pause'));
    const untils = new Map<string, number | undefined>();
    for (const g of others)
      untils.set(g.group, (await run({ pauseMs: g.ms, pauseScopes: g.scopes })).pausedUntil);
    const ends = of('end');
    // An age as it goes (since the call's send), from when it was pushed: calls begun since a
    // reading's call was sent are late (reading.lua); a stamp's age dates its call's send.
    const aged = (ageMs: number, at: number) => ageMs + Math.ceil(this.clock() - at);
    const r = await run({
      stamps: of('stamp').map((o) => ({ id: o.id, ageMs: aged(o.ageMs, o.at) })),
      ends: ends.map((o) => o.end),
      ...{ pauseMs: first?.ms, pauseScopes: first?.scopes },
      readings: of('reading').map((o) => ({ ...o.reading, ageMs: aged(o.reading.ageMs, o.at) })),
      periods: ends.find((o) => o.periods)?.periods,
    });
    if (first) untils.set(first.group, r.pausedUntil);
    let e = 0;
    return ops.map((o) =>
      o.kind === 'end'
        ? r.ends[e++]
        : o.kind === 'pause'
          ? untils.get(pauseGroup(o.scopes))
          : undefined,
    );
  }

  /** Sends what is gathered now: a command sent after it on the same connection runs after it. */
  flush(): void {
    this.batcher.flush();
  }

  push(op: Op): Promise<Answer> {
    // An end with usage may wait for company, unless a waiter of this process sleeps: the budget
    // and slot go back now and it wakes at once (its attempt goes behind this on the connection).
    const waiting = this.wakeUps.sleeping;
    const answer = this.batcher.push(op, op.kind !== 'end' || op.end.mode !== 'usage' || waiting);
    if (op.kind === 'end' && waiting) this.wakeUps.wakeHere();
    return answer;
  }
}

/** Which pause a call's 429 sets: its deployment's, or (outside a pool) the queue's (''). */
const pauseGroup = (scopes: readonly string[]) => deploymentScopeAmong(scopes) ?? '';

/** The pauses asked for in one batch, the longest per pause. */
function pausesOf(ops: readonly Extract<Op, { kind: 'pause' }>[]) {
  const groups = new Map<string, { group: string; ms: number; scopes: readonly string[] }>();
  for (const o of ops) {
    const group = pauseGroup(o.scopes);
    const ms = Math.max(o.ms, groups.get(group)?.ms ?? 0);
    groups.set(group, { group, ms, scopes: o.scopes });
  }
  return [...groups.values()];
}

/** How a failed call ends: the pause a 429 asks for, and whether the provider may have charged it. */
export interface CallFailure {
  /** Pause this long (a 429's retry-after): the queue, or in a pool its deployment only. */
  readonly pauseMs?: number | undefined;
  /** The call may have reached the provider: its estimate stays charged; else it all comes back. */
  readonly charged: boolean;
}

/**
 * One admitted call, from the provider's first answer to its end. It orders what the limiter
 * must hear: the stamp before the reading it brought, that reading before its own settle, the
 * ends before later readings, a 429's pause before its budget comes back (one `record` run each
 * moment; see Recorder).
 */
export class CallHandle {
  private begun = false;
  /** The reading its answer brought, once recorded (a run of its own, before the settle's). */
  private reading: Promise<unknown> | undefined;

  constructor(
    private readonly recorder: Recorder,
    readonly reservation: Reservation,
    /** The scope the provider's readings describe (the model's, when limited per model). */
    private readonly scope: string = GLOBAL_SCOPE,
  ) {
    // A tenant's scope is llmq's own: no reading describes it, and it keeps no open sums.
    if (scope.startsWith('tenant:')) {
      throw new TypeError(
        `a provider's readings describe its key, a model or a deployment, not a tenant: ${scope}`,
      );
    }
  }

  /** Whether the provider's response began. */
  get started(): boolean {
    return this.begun;
  }

  /** The provider admitted it: its stamp, then its headers' reading (`sentAgoMs`: since sent). */
  async begin(headers?: HeaderSource, sentAgoMs = 0): Promise<void> {
    if (this.begun) return;
    this.begun = true;
    const { id } = this.reservation;
    const at = this.recorder.clock();
    const stamp = this.recorder.push({ kind: 'stamp', id, ageMs: Math.max(0, sentAgoMs), at });
    const reading = this.read(headers, sentAgoMs);
    this.reading = reading?.catch(() => {});
    await Promise.all([stamp, reading]);
  }

  /**
   * Settles to the provider's usage (money too); usage not in whole tokens throws, the estimate
   * stays. Its reading goes first: the provider counted the call as admitted, and read after
   * the refund it would look like another client's spend.
   */
  async succeeded(usage: Usage): Promise<EndResult> {
    if (this.reading) await this.reading;
    const bad = usageError(usage);
    if (bad) {
      await this.end('keep');
      throw bad;
    }
    return (await this.end('usage', usage)) as EndResult;
  }

  /** Failed: a 429's pause, then its budget back (unless maybe charged), then its error's reading. */
  async failed(f: CallFailure, headers?: HeaderSource, sentAgoMs = 0): Promise<number | undefined> {
    const { scopes } = this.reservation;
    const ms = f.pauseMs === undefined ? undefined : Math.max(0, Math.ceil(f.pauseMs));
    const pause = ms === undefined ? undefined : this.recorder.push({ kind: 'pause', ms, scopes });
    const ended = this.end(f.charged || this.begun ? 'keep' : 'release');
    await Promise.all([ended, this.read(headers, sentAgoMs, !this.begun)]);
    return (await pause) as number | undefined;
  }

  /** Stopped before an answer (shutdown): kept when the provider may have admitted it. */
  async abandoned(): Promise<void> {
    await this.end(this.begun ? 'keep' : 'release');
  }

  private end(mode: EndRecord['mode'], usage?: Usage): Promise<unknown> {
    const { id, cost } = this.reservation;
    const end = !usage
      ? { id, mode, ...UNKNOWN_USAGE }
      : {
          ...{ id, mode, input: usage.inputTokens, reported: usage.outputTokens },
          output: this.recorder.accounting !== 'reserve' ? usage.outputTokens : -1,
          micros: usage.costMicros ?? -1,
        };
    return this.recorder.push({ kind: 'end', end, periods: cost.money?.periods });
  }

  /** Pushes the reading `headers` bring, if any (a reading goes at the end of the turn). */
  private read(
    headers: HeaderSource | undefined,
    sentAgoMs: number,
    refused = false,
  ): Promise<unknown> | undefined {
    const dims = readingOf(headers);
    if (!dims) return undefined;
    const { scope, reservation, recorder } = this;
    const ageMs = Math.ceil(sentAgoMs);
    const reading = { scope, id: reservation.id, ageMs, dims, ...(refused ? { refused } : {}) };
    return recorder.push({ kind: 'reading', reading, at: recorder.clock() });
  }
}

/** The rate-limit headers as record takes them, by short dimension name; undefined when none. */
function readingOf(headers: HeaderSource | undefined): ReadingRecord['dims'] | undefined {
  if (!headers) return undefined;
  const figures = readRateLimitHeaders(headers);
  const dims: Record<string, { limit: number; remaining: number; reset: number }> = {};
  for (const d of DIMENSIONS) {
    const f = figures[d.name];
    if (f) dims[d.lua] = { limit: f.limit, remaining: f.remaining, reset: f.resetMs ?? -1 };
  }
  return Object.keys(dims).length > 0 ? dims : undefined;
}
