import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { freePort } from '../../shared/private-redis.ts';

/**
 * Real Redis deployments for tests and the bench: a Cluster (masters with a replica each) and Sentinel (a
 * master, a replica, three sentinels), each on free ports in a temp dir, killed and removed by
 * `stop()` (also when starting fails half-way, and when the test process exits).
 */

const run = promisify(execFile);

/** Resolves once `check` holds, polling every `everyMs`; rejects after `timeoutMs`. */
export async function until(
  check: () => boolean | Promise<boolean>,
  timeoutMs = 10_000,
  everyMs = 20,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

/** One redis-server (or sentinel) process. */
export interface RedisProc {
  readonly port: number;
  readonly alive: boolean;
  /** SIGKILL, resolving when the process is gone. */
  kill(): Promise<void>;
}

function startProc(args: readonly string[], port: number): RedisProc {
  const child = spawn('redis-server', [...args], { stdio: 'ignore' });
  live.add(child);
  child.once('exit', () => live.delete(child));
  return {
    port,
    get alive() {
      return child.exitCode === null && child.signalCode === null;
    },
    kill: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGKILL');
      }),
  };
}

/** Runs `fn` on a short-lived connection to 127.0.0.1:port. */
export async function onPort<T>(port: number, fn: (r: Redis) => Promise<T>): Promise<T> {
  const r = new Redis({
    port,
    host: '127.0.0.1',
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: 1_000,
  });
  r.on('error', () => {});
  try {
    await r.connect();
    return await fn(r);
  } finally {
    r.disconnect();
  }
}

const answers = (port: number) =>
  onPort(port, (r) => r.ping()).then(
    () => true,
    () => false,
  );

function infoField(info: string, field: string): string | undefined {
  return new RegExp(`^${field}:(.*)\\r?$`, 'm').exec(info)?.[1]?.trim();
}

/** Starts procs via `start`, killing what did start and removing `dir` if any step throws. */
async function guarded<T>(dir: string, procs: RedisProc[], start: () => Promise<T>): Promise<T> {
  try {
    return await start();
  } catch (err) {
    await stopAll(procs, dir);
    throw err;
  }
}

/** Nothing on disk but the temp dir; replicas sync at once (a 5 s delay by default). */
function serverBase(dir: string): string[] {
  return [
    '--bind',
    '127.0.0.1',
    '--dir',
    dir,
    '--save',
    '',
    '--appendonly',
    'no',
    '--repl-diskless-sync-delay',
    '0',
  ];
}

async function stopAll(procs: readonly RedisProc[], dir: string): Promise<void> {
  await Promise.all(procs.map((p) => p.kill()));
  rmSync(dir, { recursive: true, force: true });
}

/** A redis-server that keeps every write in its append-only file, and can be killed and restarted from it. */
export interface AofRedis {
  readonly url: string;
  readonly port: number;
  /** Where its AOF lives. */
  readonly dir: string;
  readonly alive: boolean;
  /** SIGKILL, resolving when the process is gone. */
  kill(): Promise<void>;
  /** Starts it again on the same port and dir (it loads the AOF); resolves once it answers. */
  restart(): Promise<void>;
  /** Kills it and removes its dir. */
  stop(): Promise<void>;
}

/**
 * Starts a redis-server on a free port in a temp dir with `--appendonly yes --appendfsync always`:
 * a write it acknowledged survives a SIGKILL.
 */
export async function startAofRedis(): Promise<AofRedis> {
  const dir = mkdtempSync(join(tmpdir(), 'llmq-aof-'));
  const port = await freePort();
  const args = [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--dir',
    dir,
    '--save',
    '',
    '--appendonly',
    'yes',
    '--appendfsync',
    'always',
  ];
  let proc = startProc(args, port);
  const procs = [proc];
  const up = () => until(() => answers(port), 30_000, 50);
  await guarded(dir, procs, up);
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    dir,
    get alive() {
      return proc.alive;
    },
    kill: () => proc.kill(),
    async restart() {
      await proc.kill();
      proc = startProc(args, port);
      procs[0] = proc;
      await up();
    },
    stop: () => stopAll(procs, dir),
  };
}

const isMaster = async (port: number) => (await onPort(port, (r) => r.role()))[0] === 'master';

export interface TestCluster {
  /** `redis+cluster://` with every node as a seed. */
  readonly url: string;
  readonly nodes: readonly RedisProc[];
  /** The port of the master serving a slot (CLUSTER SLOTS, asked of a live node). */
  masterOfSlot(slot: number): Promise<number>;
  /** The slot of a key, as the cluster computes it. */
  keySlot(key: string): Promise<number>;
  /**
   * SIGKILLs the master on `port` and resolves with the port of its replica once that replica
   * is master and every live node reports `cluster_state:ok`.
   */
  killMaster(port: number): Promise<number>;
  stop(): Promise<void>;
}

/**
 * The longest {@link startCluster} may take: the sum of its steps' bounds, which hold on a loaded
 * 2-core machine (six servers starting beside a test suite); a test's hook waits this long.
 */
export const CLUSTER_START_MS = 240_000;

/** A free port not in `taken` (it joins it). */
async function freshPort(taken: Set<number>): Promise<number> {
  for (;;) {
    const port = await freePort();
    if (!taken.has(port)) {
      taken.add(port);
      return port;
    }
  }
}

/**
 * Starts a server on two fresh ports (`argsFor` builds its arguments; `nodes` gets it) and
 * resolves once it answers. A port handed out free may be taken before the server binds it (the
 * tests start servers side by side): a server that exits before answering starts again on
 * other ports, within `timeoutMs`.
 */
async function startAnswering(
  argsFor: (port: number, busPort: number) => string[],
  taken: Set<number>,
  nodes: RedisProc[],
  timeoutMs = 60_000,
): Promise<RedisProc> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const port = await freshPort(taken);
    const proc = startProc(argsFor(port, await freshPort(taken)), port);
    nodes.push(proc);
    const left = Math.max(1, deadline - Date.now());
    await until(async () => !proc.alive || (await answers(port)), left, 50);
    if (proc.alive) return proc;
    nodes.splice(nodes.indexOf(proc), 1);
  }
}

/** Starts `masters` masters with one replica each and joins them into a cluster. */
export async function startCluster(masters = 3): Promise<TestCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'llmq-cluster-'));
  const nodes: RedisProc[] = [];
  return guarded(dir, nodes, async () => {
    // As for one server (see above): on a loaded machine six of them take a while to answer.
    // Each step has its own bound; together they stay within CLUSTER_START_MS.
    const taken = new Set<number>();
    const node = (port: number, busPort: number) => [
      '--port',
      String(port),
      '--cluster-port',
      String(busPort),
      '--cluster-enabled',
      'yes',
      '--cluster-config-file',
      `nodes-${port}.conf`,
      '--cluster-node-timeout',
      '1000',
      '--cluster-replica-validity-factor',
      '0',
      ...serverBase(dir),
    ];
    const starts = Array.from({ length: masters * 2 }, () => startAnswering(node, taken, nodes));
    await Promise.all(starts);
    const addrs = nodes.map((n) => `127.0.0.1:${n.port}`);
    await run(
      'redis-cli',
      ['--cluster', 'create', ...addrs, '--cluster-replicas', '1', '--cluster-yes'],
      { timeout: 60_000 },
    );
    await until(() => clusterHealthy(nodes, masters * 2), 45_000, 100);
    // A replica that has not synced yet would be promoted empty.
    await until(async () => (await syncedReplicas(nodes)) === masters, 45_000, 100);
    const live = () => nodes.find((n) => n.alive)!.port;
    const masterOfSlot = (slot: number) =>
      onPort(live(), async (r) => {
        const ranges = await r.cluster('SLOTS');
        const port = ranges.find(([from, to]) => slot >= from && slot <= to)?.[2]?.[1];
        if (port === undefined) throw new Error(`no master serves slot ${slot}`);
        return port;
      });
    return {
      url: `redis+cluster://${addrs.join(',')}`,
      nodes,
      masterOfSlot,
      keySlot: (key) => onPort(live(), (r) => r.cluster('KEYSLOT', key)) as Promise<number>,
      async killMaster(port) {
        const replica = await onPort(port, async (r) => {
          const id = (await r.cluster('MYID')) as string;
          const lines = ((await r.cluster('NODES')) as string).split('\n');
          const line = lines.find((l) => l.split(' ')[3] === id);
          return Number(line?.split(' ')[1]?.split(/[:@]/)[1]);
        });
        await nodes.find((n) => n.port === port)!.kill();
        const rest = nodes.filter((n) => n.alive);
        await until(
          async () => (await isMaster(replica)) && (await clusterHealthy(rest)),
          20_000,
          100,
        );
        return replica;
      },
      stop: () => stopAll(nodes, dir),
    };
  });
}

async function syncedReplicas(nodes: readonly RedisProc[]): Promise<number> {
  let n = 0;
  for (const node of nodes) {
    const info = await onPort(node.port, (r) => r.info('replication')).catch(() => '');
    if (infoField(info, 'master_link_status') === 'up') n++;
  }
  return n;
}

/** Every node says `cluster_state:ok`, with all slots served (and `known` nodes, when given). */
async function clusterHealthy(nodes: readonly RedisProc[], known?: number) {
  for (const n of nodes) {
    const info = await onPort(n.port, (r) => r.cluster('INFO') as Promise<string>).catch(() => '');
    if (infoField(info, 'cluster_state') !== 'ok') return false;
    if (infoField(info, 'cluster_slots_ok') !== '16384') return false;
    if (known !== undefined && infoField(info, 'cluster_known_nodes') !== String(known))
      return false;
  }
  return true;
}

export interface TestSentinel {
  /** `redis+sentinel://` naming the three sentinels and `masterName` (the real one unless given). */
  url(masterName?: string): string;
  readonly masterName: string;
  readonly master: RedisProc;
  readonly replica: RedisProc;
  readonly sentinels: readonly RedisProc[];
  /**
   * SIGKILLs the master and resolves with the port the sentinels then name as master (the
   * replica's) once all of them agree.
   */
  killMaster(): Promise<number>;
  stop(): Promise<void>;
}

/** Starts a master, a replica of it, and three sentinels monitoring them (quorum 2). */
export async function startSentinel(masterName = 'llmqmaster'): Promise<TestSentinel> {
  const dir = mkdtempSync(join(tmpdir(), 'llmq-sentinel-'));
  const procs: RedisProc[] = [];
  return guarded(dir, procs, async () => {
    const base = serverBase(dir);
    const masterPort = await freePort();
    const master = startProc(['--port', String(masterPort), ...base], masterPort);
    procs.push(master);
    const replicaPort = await freePort();
    const replica = startProc(
      ['--port', String(replicaPort), ...base, '--replicaof', '127.0.0.1', String(masterPort)],
      replicaPort,
    );
    procs.push(replica);
    await until(() => answers(masterPort), 10_000, 50);
    await until(
      async () => {
        const info = await onPort(replicaPort, (r) => r.info('replication')).catch(() => '');
        return infoField(info, 'master_link_status') === 'up';
      },
      10_000,
      50,
    );
    const sentinels: RedisProc[] = [];
    for (let i = 0; i < 3; i++) {
      const port = await freePort();
      const conf = join(dir, `sentinel-${port}.conf`);
      writeFileSync(
        conf,
        [
          `port ${port}`,
          'bind 127.0.0.1',
          `dir ${dir}`,
          `sentinel monitor ${masterName} 127.0.0.1 ${masterPort} 2`,
          `sentinel down-after-milliseconds ${masterName} 1000`,
          `sentinel failover-timeout ${masterName} 5000`,
          '',
        ].join('\n'),
      );
      const s = startProc([conf, '--sentinel'], port);
      procs.push(s);
      sentinels.push(s);
    }
    // Failover needs each sentinel to know the replica (from the master's INFO, polled every
    // 10 s) and the two other sentinels (hello messages every 2 s): a loaded machine takes longer.
    await until(
      async () => {
        for (const s of sentinels) {
          const seen = await onPort(s.port, async (r) => {
            const m = (await r.call('SENTINEL', 'MASTER', masterName)) as string[];
            const field = (k: string) => m[m.indexOf(k) + 1];
            return field('num-slaves') === '1' && field('num-other-sentinels') === '2';
          }).catch(() => false);
          if (!seen) return false;
        }
        return true;
      },
      40_000,
      100,
    );
    const masterAt = (s: RedisProc) =>
      onPort(s.port, (r) => r.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', masterName)).then(
        (a) => Number((a as string[])[1]),
        () => 0,
      );
    return {
      url: (name = masterName) =>
        `redis+sentinel://${sentinels.map((s) => `127.0.0.1:${s.port}`).join(',')}/${name}`,
      masterName,
      master,
      replica,
      sentinels,
      async killMaster() {
        await master.kill();
        await until(
          async () => {
            for (const s of sentinels) if ((await masterAt(s)) !== replicaPort) return false;
            return isMaster(replicaPort);
          },
          30_000,
          100,
        );
        return replicaPort;
      },
      stop: () => stopAll(procs, dir),
    };
  });
}
