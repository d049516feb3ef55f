import { type ChildProcess, spawn } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { join } from 'node:path';
import { trackChild } from '../processes.ts';
import { until } from '../redis-servers.ts';

const ROOT = new URL('../../../', import.meta.url).pathname;

/**
 * Node's arguments to run `llmq …args`: the compiled CLI when this module runs compiled (dist/,
 * as `llmq bench` does), else its TypeScript through tsx (the tests).
 */
export function llmqArgs(args: readonly string[]): string[] {
  const compiled = import.meta.url.endsWith('.js');
  const main = new URL(`../../cli/main.${compiled ? 'js' : 'ts'}`, import.meta.url).pathname;
  return [...(compiled ? [] : ['--import', 'tsx']), main, ...args];
}

/** How a child ended: its exit code, or the signal that killed it. */
export type ExitStatus = number | NodeJS.Signals;

/**
 * One `llmq` command in a child process (a worker, `serve`, `batch summarize`), its output kept
 * (stdout whole, stderr's tail), killed with the bench's other children if the run dies.
 */
export class CliChild {
  readonly name: string;
  readonly startedAt = Date.now();
  private readonly child: ChildProcess;
  private out = '';
  private errHead = '';
  private errTail = '';
  private status: ExitStatus | undefined;
  /** Set when the run itself killed it: its exit is not a failure. */
  killedByRun = false;
  readonly exited: Promise<ExitStatus>;

  constructor(name: string, args: readonly string[], env: NodeJS.ProcessEnv) {
    this.name = name;
    this.child = spawn(process.execPath, llmqArgs(args), {
      cwd: ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    trackChild(this.child);
    // LLMQ_CHAOS_LOG_DIR=DIR keeps each process's whole stderr there, for looking into a run.
    const logDir = process.env['LLMQ_CHAOS_LOG_DIR'];
    if (logDir) {
      const file = `${name.replace(/\W+/g, '-')}-${this.child.pid}.log`;
      this.child.stderr?.pipe(createWriteStream(join(logDir, file)));
    }
    this.child.stdout?.on('data', (c: Buffer) => {
      this.out += c.toString();
    });
    this.child.stderr?.on('data', (c: Buffer) => {
      const text = c.toString();
      if (this.errHead.length < 8_000) this.errHead = (this.errHead + text).slice(0, 8_000);
      this.errTail = (this.errTail + text).slice(-8_000);
    });
    this.exited = new Promise((resolve) => {
      this.child.once('exit', (code, signal) => {
        this.status = code ?? signal ?? -1;
        resolve(this.status);
      });
    });
  }

  get alive(): boolean {
    return this.status === undefined;
  }

  /** How it ended, once it has. */
  get exitStatus(): ExitStatus | undefined {
    return this.status;
  }

  stdout(): string {
    return this.out;
  }

  /** The first and the last 8,000 characters of its stderr. */
  stderr(): { readonly head: string; readonly tail: string } {
    return { head: this.errHead, tail: this.errTail };
  }

  /** Resolves once `check` holds on its output; rejects if it exits first or after `timeoutMs`. */
  async ready(check: (c: CliChild) => boolean, timeoutMs = 60_000): Promise<void> {
    await until(
      () => {
        if (check(this)) return true;
        if (!this.alive)
          throw new Error(
            `${this.name} exited (${this.status}) before it was ready: ${this.errTail.trim().slice(-2_000)}`,
          );
        return false;
      },
      timeoutMs,
      50,
    ).catch((err: Error) => {
      throw new Error(`${this.name}: ${err.message}`);
    });
  }

  /** Sends `signal` (SIGKILL unless told) and resolves once it is gone. */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<ExitStatus> {
    this.killedByRun = true;
    if (this.alive) this.child.kill(signal);
    return this.exited;
  }
}
