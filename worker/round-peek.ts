import type { HeadJob, HeadPeeker } from './bullmq-internals.ts';

/** The oldest a peek sent ahead may be to stand for the next round's. */
const AHEAD_MAX_AGE_MS = 20;

/**
 * The gate's peeks, sent as early as they can go: behind the last round's fetches when rounds
 * follow closely, with the idle wait's pop, and else at the round's start beside the breaker's
 * check; a round trip of their own in none of these.
 */
export class RoundPeek {
  /** When the last round had fetched its jobs, and whether this one (its `send`) began soon after. */
  private lastTakeAt = Number.NEGATIVE_INFINITY;
  private followsClosely = false;
  private ahead:
    | { readonly sentAt: number; readonly heads: Promise<HeadJob[] | undefined> }
    | undefined;

  constructor(
    private readonly peeker: HeadPeeker,
    /** A peeker on BullMQ's own connection: its peeks run after the fetches sent before them. */
    private readonly behindFetches: HeadPeeker,
    /** Slots free now: a peek sent ahead asks for no more heads than the next round can take. */
    private readonly free: () => number,
    /** Whether peeks go early at all; if not, each round peeks at its start (gate-paths.ts). */
    private readonly early = true,
  ) {}

  /** The idle wait's pop brought these. */
  woke(heads: HeadJob[]): void {
    if (!this.early) return;
    this.ahead = { sentAt: performance.now(), heads: Promise.resolve(heads) };
  }

  /**
   * The take's fetches went out: when rounds follow closely, the next round's peek goes behind
   * them (in the next turn: BullMQ writes a command a few promise steps after it is asked for),
   * for the slots these `fetched` jobs leave free.
   */
  fetchesSent(stopped: boolean, fetched: number): void {
    if (!this.early || !this.followsClosely || stopped) return;
    const n = Math.max(1, this.free() - fetched);
    const heads = new Promise<void>((r) => setImmediate(r)).then(() =>
      this.behindFetches.peekMany(n).catch(() => undefined),
    );
    this.ahead = { sentAt: performance.now(), heads };
  }

  /** The take's fetches came back. */
  arrived(): void {
    this.lastTakeAt = performance.now();
  }

  /**
   * The round's first `n` jobs: the early peek while it is fresh (an empty one is no answer:
   * the queue may have filled since), else one sent now. Undefined when it failed.
   */
  send(n: number): Promise<HeadJob[] | undefined> {
    const now = performance.now();
    this.followsClosely = now - this.lastTakeAt < AHEAD_MAX_AGE_MS;
    const ahead = this.ahead;
    this.ahead = undefined;
    const peek = () => this.peeker.peekMany(n).catch(() => undefined);
    if (!ahead || now - ahead.sentAt > AHEAD_MAX_AGE_MS) return peek();
    return ahead.heads.then((heads) => (heads?.length ? heads.slice(0, n) : peek()));
  }
}
