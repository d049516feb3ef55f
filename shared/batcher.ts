/**
 * Gathers what many callers ask for within one turn of the event loop and sends it as one
 * command: when a worker's calls end together (as they do when one socket read brings several
 * answers), their settles, stamps and counters take one round trip instead of one each. Each
 * caller's promise settles with its own part of the answer, or with the command's error.
 */
export class Batcher<I, O> {
  private pending: { item: I; resolve: (o: O) => void; reject: (e: unknown) => void }[] = [];
  private scheduled = false;

  /**
   * @param run sends a batch; resolves with one answer per item, in order (none when the
   *   answer is void)
   * @param maxBatch the most items one command carries (its arguments stay small)
   */
  constructor(
    private readonly run: (items: I[]) => Promise<O[]>,
    private readonly maxBatch = 100,
  ) {}

  push(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.pending.push({ item, resolve, reject });
      if (this.pending.length >= this.maxBatch) this.flush();
      else if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  /**
   * Sends what is gathered now instead of at the end of the turn. The command is written before
   * this returns, so a command sent after it on the same connection runs after it.
   */
  flush(): void {
    this.scheduled = false;
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
