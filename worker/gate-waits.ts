import type { Decision } from '../shared/limiter/types.ts';

/**
 * Why the gate held a job back: the limiter's denial reasons (`budget`, `paused`,
 * `concurrency` — the fleet's in-flight cap —, `queued` behind another waiter, `probe`), and the
 * worker's own: `slots` (this process runs `concurrency` calls already) and `breaker` (open).
 */
export type WaitReason = (Decision & { ok: false })['reason'] | 'slots' | 'breaker' | 'cache';

/** One stretch of waiting, in ms since the epoch. */
export interface WaitSegment {
  readonly reason: WaitReason;
  /** For `budget`: the scope and dimension that bind (`global`, `outputTokens`). */
  readonly scope?: string | undefined;
  readonly dimension?: string | undefined;
  readonly start: number;
  end: number;
}

/** Jobs whose waits are kept for a launch here; another worker may take the job instead. */
const MAX_JOBS = 1_000;
/** Waits kept per job: a long wait through many changes of reason keeps the latest. */
const MAX_SEGMENTS = 50;

/**
 * What the gate waited for, per job, for that job's trace, log and histogram. The gate waits for
 * the job at the head of the queue; waits before a head is known (slots, breaker) go to the next
 * head. Only in-process bookkeeping: no Redis.
 */
export class GateWaits {
  /** Waits before a head was known. */
  private unassigned: WaitSegment[] = [];
  private open: { jobId: string; seg: WaitSegment } | undefined;
  private readonly byJob = new Map<string, WaitSegment[]>();

  constructor(private readonly clock: () => number = Date.now) {}

  /** A wait with no head yet (this process's slots, the breaker); under 5 ms is no wait. */
  hold(reason: WaitReason, start: number, end = this.clock()): void {
    if (end - start < 5) return;
    const last = this.unassigned.at(-1);
    if (last && last.reason === reason && start - last.end < 5) last.end = end;
    else if (this.unassigned.length < MAX_SEGMENTS) this.unassigned.push({ reason, start, end });
  }

  /** The limiter denied the head job `jobId`: its wait goes on, or a new stretch begins. */
  denied(jobId: string, d: Decision & { ok: false }): void {
    const now = this.clock();
    const o = this.open;
    if (
      o &&
      o.jobId === jobId &&
      o.seg.reason === d.reason &&
      o.seg.scope === d.scope &&
      o.seg.dimension === d.dimension
    ) {
      o.seg.end = now;
      return;
    }
    this.close(now);
    this.takeUnassigned(jobId);
    this.open = {
      jobId,
      seg: { reason: d.reason, scope: d.scope, dimension: d.dimension, start: now, end: now },
    };
  }

  /** The head job `jobId` was admitted: its wait ends now. */
  admitted(jobId: string): void {
    if (this.open) this.close(this.clock());
    if (this.unassigned.length > 0) this.takeUnassigned(jobId);
  }

  /** The waits kept for a job, removed; undefined when it did not wait here. */
  take(jobId: string): readonly WaitSegment[] | undefined {
    if (this.byJob.size === 0) return undefined;
    const segs = this.byJob.get(jobId);
    if (segs) this.byJob.delete(jobId);
    return segs;
  }

  private close(now: number): void {
    const o = this.open;
    if (!o) return;
    this.open = undefined;
    o.seg.end = now;
    this.push(o.jobId, [o.seg]);
  }

  private takeUnassigned(jobId: string): void {
    if (this.unassigned.length === 0) return;
    this.push(jobId, this.unassigned);
    this.unassigned = [];
  }

  private push(jobId: string, segs: readonly WaitSegment[]): void {
    const list = this.byJob.get(jobId);
    if (list) {
      for (const s of segs) if (list.length < MAX_SEGMENTS) list.push(s);
      return;
    }
    if (this.byJob.size >= MAX_JOBS) {
      const oldest = this.byJob.keys().next().value;
      if (oldest !== undefined) this.byJob.delete(oldest);
    }
    this.byJob.set(jobId, [...segs]);
  }
}

/** The total waited, in ms. */
export const totalWaitMs = (segs: readonly WaitSegment[] | undefined): number =>
  (segs ?? []).reduce((n, s) => n + (s.end - s.start), 0);

/** One line per reason: `budget (global outputTokens) 1.2 s, paused 300 ms`. */
export function describeWaits(segs: readonly WaitSegment[]): string {
  const sums = new Map<string, number>();
  for (const s of segs) {
    const label =
      s.reason === 'budget' && s.scope
        ? `budget (${s.scope}${s.dimension ? ` ${s.dimension}` : ''})`
        : s.reason;
    sums.set(label, (sums.get(label) ?? 0) + (s.end - s.start));
  }
  return [...sums].map(([label, ms]) => `${label} ${formatMs(ms)}`).join(', ');
}

/** `850 ms`, `1.2 s`. */
export function formatMs(ms: number): string {
  return ms < 1_000 ? `${Math.round(ms)} ms` : `${(ms / 1_000).toFixed(1)} s`;
}
