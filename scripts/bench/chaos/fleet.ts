import { CliChild, type ExitStatus } from './cli-child.ts';

/** How to start one of the run's long-running commands again. */
export interface Role {
  readonly name: string;
  readonly args: readonly string[];
  readonly env: NodeJS.ProcessEnv;
  /** True once its output says it is working; absent: it is working once started. */
  readonly isReady?: (c: CliChild) => boolean;
  /** It ends by itself when its work is done (the batch command): exit 0 is not a failure. */
  readonly finishes?: boolean;
}

/**
 * The run's processes, one per role: started, killed and restarted by the run, watched for
 * exits the run did not cause (recorded, and the process started again so the run goes on).
 */
export class Fleet {
  readonly unexpectedExits: string[] = [];
  /** Exit statuses of the roles that finish by themselves, per role, in order. */
  readonly runs = new Map<string, ExitStatus[]>();
  private readonly current = new Map<string, CliChild>();
  private readonly roles = new Map<string, Role>();
  private watching: NodeJS.Timeout | undefined;
  private restarts = 0;

  /** Starts `role` (again) and resolves once it is ready. */
  async start(role: Role, timeoutMs = 90_000): Promise<CliChild> {
    this.roles.set(role.name, role);
    const child = new CliChild(role.name, role.args, role.env);
    this.current.set(role.name, child);
    void child.exited.then((status) => {
      if (role.finishes) this.runs.set(role.name, [...(this.runs.get(role.name) ?? []), status]);
    });
    if (role.isReady) await child.ready(role.isReady, timeoutMs);
    return child;
  }

  get(name: string): CliChild {
    const c = this.current.get(name);
    if (!c) throw new Error(`no process ${name}`);
    return c;
  }

  /** SIGKILLs the role's process and starts it again; resolves once the new one is ready. */
  async killAndRestart(name: string): Promise<void> {
    await this.get(name).kill('SIGKILL');
    await this.start(this.roles.get(name)!);
  }

  /** True when a role that finishes by itself has (exit 0). */
  finished(name: string): boolean {
    return this.get(name).exitStatus === 0;
  }

  /**
   * Every 250 ms: a process that exited without the run killing it (other than a finishing
   * role's exit 0) is recorded and started again, at most `maxRestarts` times in all.
   */
  supervise(maxRestarts = 5): void {
    this.watching = setInterval(() => {
      for (const [name, child] of this.current) {
        if (child.alive || child.killedByRun) continue;
        const role = this.roles.get(name)!;
        if (role.finishes && child.exitStatus === 0) continue;
        const tail = child.stderr().tail.trim().split('\n').slice(-3).join(' | ');
        this.unexpectedExits.push(`${name} exited (${child.exitStatus}): ${tail.slice(0, 600)}`);
        child.killedByRun = true;
        if (this.restarts++ < maxRestarts) void this.start(role).catch(() => {});
      }
    }, 250);
  }

  /** Stops watching and kills every process still running. */
  async stop(): Promise<void> {
    clearInterval(this.watching);
    await Promise.all([...this.current.values()].map((c) => c.kill('SIGKILL')));
  }
}
