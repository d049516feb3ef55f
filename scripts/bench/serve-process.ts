import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { trackChild } from './processes.ts';

const ROOT = new URL('../../', import.meta.url).pathname;

/** `llmq serve` as a user runs it: the CLI in a process of its own, compiled or through tsx. */
export class ServeProcess {
  private stderrTail = '';

  private constructor(
    private readonly child: ChildProcess,
    /** `http://127.0.0.1:port` */
    readonly url: string,
  ) {
    child.stderr?.on('data', (c: Buffer) => {
      this.stderrTail = (this.stderrTail + c.toString()).slice(-4_000);
    });
  }

  /** Starts `llmq serve --port 0` with `env` added; resolves once it printed its URL. */
  static async start(env: Record<string, string>, timeoutMs = 60_000): Promise<ServeProcess> {
    const compiled = import.meta.url.endsWith('.js');
    const main = new URL(`../cli/main.${compiled ? 'js' : 'ts'}`, import.meta.url).pathname;
    const child = spawn(
      process.execPath,
      [...(compiled ? [] : ['--import', 'tsx']), main, 'serve', '--port', '0'],
      { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    trackChild(child);
    let out = '';
    let err = '';
    child.stderr?.on('data', (c: Buffer) => {
      err = (err + c.toString()).slice(-4_000);
    });
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`llmq serve printed no URL within ${timeoutMs} ms: ${err.trim()}`));
      }, timeoutMs);
      const onData = (c: Buffer) => {
        out += c.toString();
        const line = /^(http:\/\/\S+)\n/m.exec(out);
        if (!line) return;
        clearTimeout(timer);
        child.stdout?.off('data', onData);
        resolve(line[1]!);
      };
      child.stdout?.on('data', onData);
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`llmq serve exited (${code}) before it listened: ${err.trim()}`));
      });
    });
    child.stdout?.resume();
    return new ServeProcess(child, url);
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /** The process's peak resident memory so far (Linux VmHWM), in bytes; undefined elsewhere. */
  peakRssBytes(): number | undefined {
    try {
      const status = readFileSync(`/proc/${this.child.pid}/status`, 'utf8');
      const kb = /^VmHWM:\s+(\d+)\s+kB/m.exec(status)?.[1];
      return kb === undefined ? undefined : Number(kb) * 1024;
    } catch {
      return undefined;
    }
  }

  /** SIGTERM, then SIGKILL if it has not exited within `graceMs`; resolves with its exit. */
  async stop(graceMs = 10_000): Promise<number | string> {
    const c = this.child;
    if (c.exitCode !== null || c.signalCode !== null) return c.exitCode ?? c.signalCode ?? -1;
    const exited = new Promise<number | string>((resolve) =>
      c.once('exit', (code, signal) => resolve(code ?? signal ?? -1)),
    );
    c.kill('SIGTERM');
    const timer = setTimeout(() => c.kill('SIGKILL'), graceMs);
    try {
      return await exited;
    } finally {
      clearTimeout(timer);
    }
  }

  /** The last lines it wrote to stderr. */
  stderr(): string {
    return this.stderrTail;
  }
}
