import { closeSync, existsSync, ftruncateSync, openSync, readFileSync, writeSync } from 'node:fs';
import { ConfigError } from '../../shared/errors.ts';

/** One line of a batch's JSONL results. */
export type ResultLine =
  | {
      readonly file: string;
      readonly id: string;
      readonly summary: string;
      readonly usage: { readonly input_tokens: number; readonly output_tokens: number };
      /** A document summarized in parts: how many (the usage is of every call, parts and final). */
      readonly parts?: number;
    }
  /** Its job was dead-lettered: the reason (`llmq dlq show <id>`). */
  | { readonly file: string; readonly id: string; readonly error: string }
  /** It was never queued: why, and what would make it fit. */
  | { readonly file: string; readonly id: string; readonly refused: string };

/**
 * The JSONL results file of a batch run, appended one whole line per write so that an
 * interrupted run leaves only whole lines. A torn last line (a crash mid-write, a full disk) is
 * cut off when the file is opened again.
 */
export class ResultsFile {
  readonly path: string;
  /** The lines already there, parsed (unparseable lines are ignored). */
  readonly existing: readonly ResultLine[];
  private fd: number | undefined;

  private constructor(path: string, existing: ResultLine[], fd: number) {
    this.path = path;
    this.existing = existing;
    this.fd = fd;
  }

  /** Opens (or creates) the file; a ConfigError naming it when it cannot be read or written. */
  static open(path: string): ResultsFile {
    try {
      return ResultsFile.openOrThrow(path);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === undefined) throw err;
      throw new ConfigError(
        `the results file ${path} cannot be opened (${(err as Error).message}): check that its folder exists and is writable`,
      );
    }
  }

  private static openOrThrow(path: string): ResultsFile {
    const existing: ResultLine[] = [];
    let keep = 0;
    let tail: ResultLine | undefined;
    let size = 0;
    if (existsSync(path)) {
      const buf = readFileSync(path);
      size = buf.length;
      keep = buf.lastIndexOf(0x0a) + 1;
      for (const line of buf.subarray(0, keep).toString('utf8').split('\n')) {
        const v = parseLine(line);
        if (v) existing.push(v);
      }
      tail = keep < size ? parseLine(buf.subarray(keep).toString('utf8')) : undefined;
    }
    const fd = openSync(path, 'a');
    if (tail) {
      // A whole line without its newline (edited by hand): keep it, end it.
      existing.push(tail);
      writeSync(fd, '\n');
    } else if (keep < size) {
      // A torn tail: cut it so the next line starts on its own.
      ftruncateSync(fd, keep);
    }
    return new ResultsFile(path, existing, fd);
  }

  /** Writes one whole line (one write call). */
  append(line: ResultLine): void {
    if (this.fd === undefined) throw new Error(`results file ${this.path} is closed`);
    writeSync(this.fd, Buffer.from(`${JSON.stringify(line)}\n`, 'utf8'));
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}

function parseLine(line: string): ResultLine | undefined {
  if (line.trim() === '') return undefined;
  try {
    const v = JSON.parse(line) as ResultLine;
    return v && typeof v === 'object' && typeof v.file === 'string' ? v : undefined;
  } catch {
    return undefined; // Not ours: left in place, not counted.
  }
}
