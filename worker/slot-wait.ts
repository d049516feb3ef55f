/**
 * Waiting for one of this process's slots (its `concurrency`): the gate waits here while every
 * slot holds a call, and the end of a call wakes it.
 */
export class SlotWait {
  private wake: (() => void) | undefined;

  constructor(
    private readonly o: {
      /** Calls this process makes at once. */
      readonly concurrency: () => number;
      /** Calls in flight. */
      readonly busy: () => number;
      readonly stopped: AbortSignal;
    },
  ) {}

  /** A slot came free. */
  freed(): void {
    this.wake?.();
  }

  /** Resolves once a slot is free, or the worker stops. */
  async wait(): Promise<void> {
    const signal = this.o.stopped;
    while (this.o.busy() >= this.o.concurrency() && !signal.aborted) {
      await new Promise<void>((resolve) => {
        // One listener at a time: the pool waits here every time it is full, for as long as
        // the process lives.
        const wake = () => {
          signal.removeEventListener('abort', wake);
          this.wake = undefined;
          resolve();
        };
        this.wake = wake;
        signal.addEventListener('abort', wake, { once: true });
      });
    }
  }
}
