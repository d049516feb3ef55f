/**
 * The suite leaves no process behind. Setup marks this run in the environment, which every test
 * worker inherits and passes on to what it starts (CLI commands, worker processes, mock servers,
 * private redis-servers, browsers); teardown, after the last test file, looks for any process
 * still carrying the mark, gives it a moment to finish exiting, then kills it and fails the run,
 * naming each one. Linux only (it reads /proc); elsewhere the check is skipped.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

/** The variable that marks the processes of one run. */
export const RUN_MARK = 'LLMQ_TEST_RUN';
/** How long a process the tests stopped may take to finish exiting. */
const EXIT_GRACE_MS = 10_000;

interface Leftover {
  readonly pid: number;
  readonly command: string;
}

function readProc(pid: string, file: string): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/${file}`, 'utf8');
  } catch {
    return undefined; // gone meanwhile, or another user's
  }
}

/** The parent's pid, from /proc/<pid>/stat (after the command's closing parenthesis). */
function parentOf(pid: string): number {
  const stat = readProc(pid, 'stat') ?? '';
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
}

/** Live processes carrying this run's mark, but for vitest itself and its test workers. */
function marked(run: string): Leftover[] {
  const found: Leftover[] = [];
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    if (Number(pid) === process.pid || parentOf(pid) === process.pid) continue;
    const environ = readProc(pid, 'environ')?.split('\0') ?? [];
    if (!environ.includes(`${RUN_MARK}=${run}`)) continue;
    const command = (readProc(pid, 'cmdline') ?? '').split('\0').join(' ').trim().slice(0, 200);
    found.push({ pid: Number(pid), command });
  }
  return found;
}

export function setup(): void {
  process.env[RUN_MARK] = randomUUID();
}

export async function teardown(): Promise<void> {
  const run = process.env[RUN_MARK];
  if (!run || !existsSync('/proc/self/environ')) return;
  const deadline = Date.now() + EXIT_GRACE_MS;
  let left = marked(run);
  while (left.length > 0 && Date.now() < deadline) {
    await sleep(200);
    left = marked(run);
  }
  if (left.length === 0) return;
  for (const p of left) {
    try {
      process.kill(p.pid, 'SIGKILL');
    } catch {
      // it ended by itself meanwhile
    }
  }
  // vitest logs an error thrown here but still exits 0: the exit code says it.
  process.exitCode = 1;
  throw new Error(
    `${left.length} process(es) the tests started were still running after the last test (killed now):\n` +
      left.map((p) => `  pid ${p.pid}: ${p.command}`).join('\n'),
  );
}
