import { setTimeout as sleep } from 'node:timers/promises';

/**
 * asyncio's Lock and Semaphore, as the article's Python clients use them: waiters are served
 * first come, first served (asyncio's are FIFO too), so a large request is not starved.
 */
export class Semaphore {
  private free: number;
  private readonly waiters: (() => void)[] = [];

  constructor(size: number) {
    if (!Number.isInteger(size) || size < 1)
      throw new TypeError(`Semaphore size must be a whole number from 1 up, got ${size}`);
    this.free = size;
  }

  /** `async with sem:` */
  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.free > 0) this.free--;
    else await new Promise<void>((resolve) => this.waiters.push(resolve));
    try {
      return await fn();
    } finally {
      const next = this.waiters.shift();
      if (next) next();
      else this.free++;
    }
  }
}

/** `asyncio.Lock()`: a semaphore of one. */
export class Lock extends Semaphore {
  constructor() {
    super(1);
  }
}

/** `time.monotonic()`, in seconds. */
export const monotonic = (): number => performance.now() / 1000;

/** `await asyncio.sleep(seconds)`. */
export const sleepSeconds = (s: number): Promise<void> => sleep(Math.max(0, s) * 1000);

/** What every client limiter offers: wait until `n` tokens may be spent. */
export interface TokenLimiter {
  acquire(n: number): Promise<void>;
}

/**
 * The article's estimate: `max(1, len(json.dumps(messages)) // 4)`, with Python's json.dumps
 * (", " and ": " separators, non-ASCII escaped).
 */
export function estimateInputTokens(messages: unknown): number {
  return Math.max(1, Math.floor(pythonJsonDumps(messages).length / 4));
}

function pythonJsonDumps(v: unknown): string {
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'string') {
    return JSON.stringify(v).replace(
      /[\u007f-\uffff]/g,
      (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
    );
  }
  if (typeof v === 'number' || typeof v === 'boolean') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(pythonJsonDumps).join(', ')}]`;
  const entries = Object.entries(v as Record<string, unknown>).map(
    ([k, x]) => `${pythonJsonDumps(k)}: ${pythonJsonDumps(x)}`,
  );
  return `{${entries.join(', ')}}`;
}
