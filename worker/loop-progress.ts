import type { WorkerHealth } from './worker-options.ts';

/**
 * The gate loop's progress, as the liveness probe reads it: when its current step began, how
 * many rounds it ran and calls it started. Waiting for a free slot is no step: the calls that
 * hold the slots end by their own timeouts.
 */
export class LoopProgress {
  private stepSince = Date.now();
  private resting = false;
  private roundCount = 0;
  private callCount = 0;

  /** A gate round begins. */
  round(): void {
    this.stepSince = Date.now();
    this.roundCount++;
  }

  /** A call starts. */
  called(): void {
    this.callCount++;
  }

  /** Waits for a free slot (`free`); the next step begins when it resolves. */
  async rest(free: () => Promise<void>): Promise<void> {
    this.resting = true;
    try {
      await free();
    } finally {
      this.resting = false;
      this.stepSince = Date.now();
    }
  }

  /**
   * The current step's length (0 while resting for a slot, or once `stopped`), and the rounds and
   * calls so far.
   */
  read(stopped: boolean): Pick<WorkerHealth, 'stepMs' | 'rounds' | 'calls'> {
    const stepMs = stopped || this.resting ? 0 : Date.now() - this.stepSince;
    return { stepMs, rounds: this.roundCount, calls: this.callCount };
  }
}
