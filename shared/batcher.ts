/**
 * Gathers what many callers ask for and sends it as one command: when a worker's calls end
 * together (as they do when one socket read brings several answers), their settles, stamps and
 * counters take one round trip instead of one each. Each caller's promise settles with its own
 * part of the answer, or with the command's error.
 *
 * By default a batch is sent at the end of the turn of the event loop. With `delayMs`, items
 * wait up to that long for company (counters, or stamps that may come late); `push(item, true)`
 * still asks for the end of this turn, and takes what waits along.
 */
export class Batcher<I, O> {
  private pending: { item: I; resolve: (o: O) => void; reject: (e: unknown) => void }[] = [];
  private soon: NodeJS.Immediate | undefined;
  private later: NodeJS.Timeout | undefined;
  private readonly maxBatch: number;
  private readonly delayMs: number;

  /**
   * @param run sends a batch; resolves with one answer per item, in order (none when the
   *   answer is void)
   * @param options.maxBatch the most items one command carries (its arguments stay small)
   * @param options.delayMs the longest an item waits for others @default 0 (end of the turn)
   */
  constructor(
    private readonly run: (items: I[]) => Promise<O[]>,
    options: { readonly maxBatch?: number; readonly delayMs?: number } = {},
  ) {
    this.maxBatch = options.maxBatch ?? 100;
    this.delayMs = options.delayMs ?? 0;
  }

  /** Adds an item; `now` sends it at the end of this turn even when the batcher may wait longer. */
  push(item: I, now = false): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.pending.push({ item, resolve, reject });
      if (this.pending.length >= this.maxBatch) this.flush();
      else if (now || this.delayMs <= 0) this.soon ??= setImmediate(() => this.flush());
      else this.later ??= setTimeout(() => this.flush(), this.delayMs);
    });
  }

  /**
   * Takes back the items `match` picks that are not sent yet (another command does their work);
   * each one's caller sees the promise `instead` gives settle in its place (`instead` is not
   * called when none was waiting).
   */
  withdraw(match: (item: I) => boolean, instead: () => Promise<O>): void {
    const gone = this.pending.filter((p) => match(p.item));
    if (gone.length === 0) return;
    this.pending = this.pending.filter((p) => !match(p.item));
    const settled = instead();
    for (const p of gone) settled.then(p.resolve, p.reject);
    if (this.pending.length === 0) this.flush();
  }

  /**
   * Sends what is gathered now instead of at the end of the turn or after the delay. The command
   * is written before this returns, so a command sent after it on the same connection runs after
   * it.
   */
  flush(): void {
    if (this.soon) clearImmediate(this.soon);
    if (this.later) clearTimeout(this.later);
    this.soon = undefined;
    this.later = undefined;
    const batch = this.pending;
    if (batch.length === 0) return;
    this.pending = [];
    let sent: Promise<O[]>;
    try {
      sent = this.run(batch.map((p) => p.item));
    } catch (err) {
      sent = Promise.reject(err);
    }
    sent.then(
      (answers) => {
        batch.forEach((p, i) => {
          p.resolve(answers[i] as O);
        });
      },
      (err: unknown) => {
        for (const p of batch) p.reject(err);
      },
    );
  }
}
