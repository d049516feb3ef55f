/**
 * What the progress display shows. A file is one call, a document in parts one call a part and
 * one to combine them: the calls are what the queue works through, the files what the run is for.
 */
export interface ProgressState {
  /** Files of the run (empty ones left out). */
  readonly files: number;
  /** Files with a summary, refused before they were queued, dead-lettered (any run). */
  readonly succeeded: number;
  readonly refused: number;
  readonly failed: number;
  /** Calls of the run's files (a file not yet planned counts one) and those that are done. */
  readonly calls: number;
  readonly callsDone: number;
  /** Input plus output tokens of the results of this run. */
  readonly tokens: number;
  /** How long the rest will take, from the queue's forecast; undefined while unknown. */
  readonly etaMs: number | undefined;
}

interface Output {
  write(chunk: string): boolean;
  readonly isTTY?: boolean;
}

function fmtCount(n: number): string {
  return n >= 1e6 ? `${(n / 1e6).toFixed(1)}M` : n >= 1e4 ? `${(n / 1e3).toFixed(1)}k` : String(n);
}

function fmtDuration(ms: number | undefined): string {
  if (ms === undefined || !Number.isFinite(ms)) return '?';
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

const filesDone = (p: ProgressState) => p.succeeded + p.refused + p.failed;

/** One line: files done of all, calls done of all, refused, dead, tokens, ETA. */
export function progressLine(p: ProgressState): string {
  const done = filesDone(p) >= p.files;
  return (
    `${filesDone(p)}/${p.files} files (${p.callsDone}/${p.calls} calls), ` +
    `${p.refused} refused, ${p.failed} dead | ${fmtCount(p.tokens)} tokens | ` +
    `ETA ${done ? '0s' : fmtDuration(p.etaMs)}`
  );
}

/**
 * Progress of a batch run: on a terminal, one bar (of calls) redrawn in place (at most 5 times a
 * second); otherwise a plain line every tenth of the calls or every 10 s, whichever comes first.
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
    const share = p.calls === 0 ? 1 : Math.min(1, p.callsDone / p.calls);
    if (this.tty) {
      if (!force && now - this.lastDraw < 200) return;
      const width = 24;
      const filled = Math.round(share * width);
      this.out.write(
        `\r\x1b[2K[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${progressLine(p)}`,
      );
      this.drawn = true;
    } else {
      const step = Math.floor(share * 10);
      if (!force && step === this.lastStep && now - this.lastDraw < 10_000) return;
      this.lastStep = step;
      this.out.write(`progress: ${progressLine(p)}\n`);
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
