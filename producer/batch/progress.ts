/** What the progress display shows. */
export interface ProgressState {
  readonly total: number;
  readonly succeeded: number;
  readonly failed: number;
  /** Input plus output tokens of the results of this run. */
  readonly tokens: number;
  /** Results that arrived in this run (for the rate). */
  readonly arrived: number;
  readonly startedAt: number;
}

interface Output {
  write(chunk: string): boolean;
  readonly isTTY?: boolean;
}

function fmtCount(n: number): string {
  return n >= 1e6 ? `${(n / 1e6).toFixed(1)}M` : n >= 1e4 ? `${(n / 1e3).toFixed(1)}k` : String(n);
}

function fmtDuration(ms: number): string {
  if (!Number.isFinite(ms)) return '?';
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

/** One line: done/total, dead, tokens, rate, ETA. */
export function progressLine(p: ProgressState, now: number): string {
  const done = p.succeeded + p.failed;
  const elapsed = Math.max(1, now - p.startedAt);
  const rate = (p.arrived * 1000) / elapsed;
  const eta = rate > 0 ? ((p.total - done) / rate) * 1000 : Number.POSITIVE_INFINITY;
  return (
    `${done}/${p.total} done, ${p.failed} dead | ${fmtCount(p.tokens)} tokens | ` +
    `${rate.toFixed(rate < 10 ? 1 : 0)}/s | ETA ${done >= p.total ? '0s' : fmtDuration(eta)}`
  );
}

/**
 * Progress of a batch run: on a terminal, one bar redrawn in place (at most 5 times a second);
 * otherwise a plain line every tenth of the way or every 10 s, whichever comes first.
 */
export class Progress {
  private readonly out: Output;
  private readonly tty: boolean;
  private readonly now: () => number;
  private lastDraw = 0;
  private lastStep = -1;
  private drawn = false;

  constructor(out: Output, now: () => number = Date.now) {
    this.out = out;
    this.tty = out.isTTY === true;
    this.now = now;
  }

  update(p: ProgressState, force = false): void {
    const now = this.now();
    const done = p.succeeded + p.failed;
    if (this.tty) {
      if (!force && now - this.lastDraw < 200) return;
      const width = 24;
      const filled = p.total === 0 ? width : Math.round((done / p.total) * width);
      this.out.write(
        `\r\x1b[2K[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${progressLine(p, now)}`,
      );
      this.drawn = true;
    } else {
      const step = p.total === 0 ? 10 : Math.floor((done / p.total) * 10);
      if (!force && step === this.lastStep && now - this.lastDraw < 10_000) return;
      this.lastStep = step;
      this.out.write(`progress: ${progressLine(p, now)}\n`);
    }
    this.lastDraw = now;
  }

  /** Ends the redrawn line so what follows starts on a fresh one. */
  finish(): void {
    if (this.tty && this.drawn) this.out.write('\n');
    this.drawn = false;
  }

  /** A message on its own line (the bar is redrawn after). */
  note(text: string): void {
    if (this.tty && this.drawn) this.out.write('\r\x1b[2K');
    this.out.write(`${text}\n`);
    this.drawn = false;
  }
}
