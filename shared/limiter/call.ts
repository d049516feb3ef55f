import { Batcher } from '../batcher.ts';
import { deploymentScopeAmong } from '../deployment-scope.ts';
import { DIMENSIONS } from '../dimensions.ts';
import { type HeaderSource, readRateLimitHeaders } from '../provider-headers.ts';
import { usageError } from './options.ts';
import type {
  EndRecord,
  EndResult,
  LimiterScripts,
  ReadingRecord,
  RecordBatch,
} from './scripts.ts';
import { GLOBAL_SCOPE, type OutputAccounting, type Reservation, type Usage } from './types.ts';
import type { WakeUps } from './wake.ts';

/**
 * The longest an end with the provider's usage waits for others to share its command. The next
 * acquire takes what waits along (Redis runs it first); a waiter of this process asleep sends it
 * at once.
 */
export const SETTLE_WAIT_MS = 5;

type Op =
  | { readonly kind: 'stamp'; readonly id: string }
  | { readonly kind: 'end'; readonly end: EndRecord; readonly periods?: readonly string[] }
  | { readonly kind: 'pause'; readonly ms: number; readonly scopes: readonly string[] }
  | { readonly kind: 'reading'; readonly reading: ReadingRecord };

type Answer = EndResult | number | undefined;

/**
 * Gathers what calls tell the limiter (stamps, ends, pauses, readings) and sends what comes
 * together as one `record` run, which applies them in that order.
 */
export class Recorder {
  private readonly batcher: Batcher<Op, Answer>;
  /** Whether a settle replaces the output reserved with the output used (not under `reserve`). */
  readonly settlesOutput: boolean;

  constructor(
    scripts: LimiterScripts,
    windowMs: number,
    channel: string,
    accounting: OutputAccounting,
    private readonly wakeUps: WakeUps,
  ) {
    this.settlesOutput = accounting !== 'reserve';
    this.batcher = new Batcher<Op, Answer>(
      async (ops) => {
        const run = (b: Omit<RecordBatch, 'stamps' | 'ends' | 'readings'> & Partial<RecordBatch>) =>
          scripts.record(
            { stamps: [], ends: [], readings: [], ...b },
            windowMs,
            channel,
            accounting,
          );
        // One pause per deployment (one key's 429 says nothing of another's): each goes in a
        // run of its own, before the run with the ends whose budget it must hold back.
        const [first, ...others] = pausesOf(ops);
        const untils = new Map<string, number | undefined>();
        for (const g of others)
          untils.set(g.group, (await run({ pauseMs: g.ms, pauseScopes: g.scopes })).pausedUntil);
        const ends = ops.flatMap((o) => (o.kind === 'end' ? [o.end] : []));
        const r = await run({
          stamps: ops.flatMap((o) => (o.kind === 'stamp' ? [o.id] : [])),
          ends,
          pauseMs: first?.ms,
          pauseScopes: first?.scopes,
          readings: ops.flatMap((o) => (o.kind === 'reading' ? [o.reading] : [])),
          periods: ops.flatMap((o) => (o.kind === 'end' && o.periods ? [o.periods] : []))[0],
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
      },
      { delayMs: SETTLE_WAIT_MS },
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
function pausesOf(ops: readonly Op[]) {
  const groups = new Map<string, { group: string; ms: number; scopes: readonly string[] }>();
  for (const o of ops) {
    if (o.kind !== 'pause') continue;
    const group = pauseGroup(o.scopes);
    const ms = Math.max(o.ms, groups.get(group)?.ms ?? 0);
    groups.set(group, { group, ms, scopes: o.scopes });
  }
  return [...groups.values()];
}

/** How a failed call ends: the pause a 429 asks for, and whether the provider may have charged it. */
export interface CallFailure {
  /**
   * Pause every worker this long (a 429 with retry-after): the queue, or in a pool the call's
   * deployment only; absent: no pause.
   */
  readonly pauseMs?: number | undefined;
  /** The call may have reached the provider: its estimate stays charged; else it all comes back. */
  readonly charged: boolean;
}

/**
 * One admitted call, from the provider's first answer to its end. It orders what the limiter
 * must hear: the stamp before the reading it brought, the ends before later readings, a 429's
 * pause before its budget comes back (one `record` run each moment; see Recorder).
 */
export class CallHandle {
  private begun = false;

  constructor(
    private readonly recorder: Recorder,
    readonly reservation: Reservation,
    /** The scope the provider's readings describe (the model's, when limited per model). */
    private readonly scope: string = GLOBAL_SCOPE,
  ) {}

  /** Whether the provider's response began (it admitted the call). */
  get started(): boolean {
    return this.begun;
  }

  /**
   * The provider's response began: it admitted the call. Stamps it, and takes the reading its
   * headers carry (`sentAgoMs`: how long ago the call was sent, so calls stamped since count as
   * not yet seen by it). Resolves once recorded.
   */
  async begin(headers?: HeaderSource, sentAgoMs = 0): Promise<void> {
    if (this.begun) return;
    this.begun = true;
    const stamp = this.recorder.push({ kind: 'stamp', id: this.reservation.id });
    await Promise.all([stamp, this.read(headers, sentAgoMs)]);
  }

  /**
   * The provider answered with its usage: settles to it (money too, with `costMicros`). Usage
   * Redis cannot count (not whole tokens) is refused with a TypeError, and the estimate stays
   * charged instead; the calls recorded beside it are unharmed.
   */
  async succeeded(usage: Usage): Promise<EndResult> {
    const bad = usageError(usage);
    if (bad) {
      await this.end('keep');
      throw bad;
    }
    return (await this.end('usage', usage)) as EndResult;
  }

  /**
   * The call failed: a 429's pause first, then its budget comes back (or stays charged when the
   * provider may have counted it), then the reading its error carried.
   */
  async failed(f: CallFailure, headers?: HeaderSource, sentAgoMs = 0): Promise<number | undefined> {
    const pause =
      f.pauseMs !== undefined
        ? this.recorder.push({
            kind: 'pause',
            ms: Math.max(0, Math.ceil(f.pauseMs)),
            scopes: this.reservation.scopes,
          })
        : undefined;
    const ended = this.end(f.charged || this.begun ? 'keep' : 'release');
    await Promise.all([ended, this.read(headers, sentAgoMs)]);
    return (await pause) as number | undefined;
  }

  /** Stopped before an answer (shutdown): kept when the provider may have admitted it. */
  async abandoned(): Promise<void> {
    await this.end(this.begun ? 'keep' : 'release');
  }

  private end(mode: EndRecord['mode'], usage?: Usage): Promise<unknown> {
    const r = this.reservation;
    return this.recorder.push({
      kind: 'end',
      end: {
        id: r.id,
        mode,
        input: usage?.inputTokens ?? -1,
        output: usage && this.recorder.settlesOutput ? usage.outputTokens : -1,
        reported: usage?.outputTokens ?? -1,
        micros: usage?.costMicros ?? -1,
      },
      periods: r.cost.money?.periods,
    });
  }

  private async read(headers: HeaderSource | undefined, sentAgoMs: number): Promise<void> {
    const reading = readingOf(headers);
    if (!reading) return;
    await this.recorder.push({
      kind: 'reading',
      reading: { scope: this.scope, ageMs: Math.round(sentAgoMs), dims: reading },
    });
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
