import { spawn, spawnSync } from 'node:child_process';
import { createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { connectRedis } from './redis.ts';

/** A free TCP port on 127.0.0.1, as the OS hands it out. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() =>
        typeof addr === 'object' && addr ? resolve(addr.port) : reject(new Error('no port')),
      );
    });
  });
}

export function redisServerInstalled(): boolean {
  return spawnSync('redis-server', ['--version'], { stdio: 'ignore' }).status === 0;
}

export interface PrivateRedis {
  readonly url: string;
  readonly port: number;
  /** Whether it runs at real-time priority (asked for, and the system allowed it). */
  readonly realtime: boolean;
  stop(): Promise<void>;
}

/**
 * Starts a throwaway `redis-server` on a free port, keeping nothing on disk. With `realtime`,
 * it runs under SCHED_FIFO when the system allows (`chrt`): processes beside it on the same cores
 * never preempt it in the middle of a command, so a command's time in SLOWLOG is its own work.
 */
export async function startPrivateRedis(
  options: { readonly realtime?: boolean } = {},
): Promise<PrivateRedis> {
  const port = await freePort();
  const child = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    {
      stdio: 'ignore',
    },
  );
  const url = `redis://127.0.0.1:${port}`;
  const deadline = Date.now() + 5_000;
  for (;;) {
    const probe = connectRedis(url, { lazyConnect: true, failFast: true });
    probe.on('error', () => {});
    try {
      await probe.connect();
      await probe.ping();
      probe.disconnect();
      break;
    } catch {
      probe.disconnect();
      if (Date.now() > deadline || child.exitCode !== null)
        throw new Error(`redis-server did not start on port ${port}`);
      await sleep(50);
    }
  }
  const realtime =
    options.realtime === true &&
    spawnSync('chrt', ['--fifo', '--pid', '10', String(child.pid)], { stdio: 'ignore' }).status ===
      0;
  return {
    url,
    port,
    realtime,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}
