import type { LlmqQueue } from '../../../shared/queues.ts';

/**
 * Reads the queue's counts every 250 ms (one read at a time: while Redis is down a read waits,
 * and the last counts stay), for the run's triggers and the feeders' pace.
 */
export class QueueMonitor {
  completed = 0;
  failed = 0;
  /** Jobs waiting, delayed or running. */
  backlog = 0;
  /** When `completed` last grew (ms since the epoch), 0 before. */
  completedAt = 0;
  /** When the read behind the current counts started. */
  readAt = 0;
  private busy = false;
  private readonly timer: NodeJS.Timeout;

  constructor(queue: LlmqQueue) {
    this.timer = setInterval(() => {
      if (this.busy) return;
      this.busy = true;
      const started = Date.now();
      queue
        .getJobCounts('wait', 'prioritized', 'active', 'delayed', 'completed', 'failed')
        .then((c) => {
          const completed = c['completed'] ?? 0;
          if (completed > this.completed) this.completedAt = Date.now();
          this.completed = completed;
          this.readAt = started;
          this.failed = c['failed'] ?? 0;
          this.backlog =
            (c['wait'] ?? 0) + (c['prioritized'] ?? 0) + (c['active'] ?? 0) + (c['delayed'] ?? 0);
        })
        .catch(() => {})
        .finally(() => {
          this.busy = false;
        });
    }, 250);
  }

  /** Nothing waits or runs, as read by a read that started after `since`. */
  settled(since: number): boolean {
    return this.readAt > since && this.backlog === 0;
  }

  stop(): void {
    clearInterval(this.timer);
  }
}
