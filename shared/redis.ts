import { Cluster, type ClusterOptions, Redis, type RedisOptions } from 'ioredis';
import {
  ConfigError,
  type LlmqError,
  RedisOutOfMemoryError,
  RedisUnavailableError,
} from './errors.ts';
import {
  describeHosts,
  parseRedisUrl,
  type RedisDeployment,
  type RedisEndpoint,
} from './redis-url.ts';

/**
 * A connection to any deployment `REDIS_URL` can name: one node or Sentinel's master, or a Cluster.
 * @inline
 */
export type RedisClient = Redis | Cluster;

/**
 * ioredis's options, and whether to give up at once.
 * @inline
 */
export interface ConnectOptions extends RedisOptions {
  /**
   * Give up at once instead of retrying: no reconnection, no offline queue, no retry of a
   * command. For checks and one-shot commands that must answer or fail.
   * @default false
   */
  readonly failFast?: boolean;
  /**
   * On a Cluster, SSUBSCRIBE through one connection per master (events `smessage`), for
   * channels published with SPUBLISH. Ignored elsewhere (SSUBSCRIBE works on any Redis 7).
   * @default false
   */
  readonly shardedSubscribers?: boolean;
}

/**
 * Through Sentinel, a write refused with READONLY went to a master that became a replica:
 * reconnect, which asks the sentinels for the master again, and resend the command.
 */
function reconnectOnReadonly(err: Error): 2 | false {
  return err.message.startsWith('READONLY') ? 2 : false;
}

/**
 * The one place llmq builds a Redis client. `url` is a `REDIS_URL`: `redis://` or `rediss://`
 * for one node, `redis+sentinel://` for Sentinel's master, `redis+cluster://` for a Cluster
 * (docs/deployment.md). `options` go to every node's connection. Without `failFast` the client
 * has what BullMQ needs (`maxRetriesPerRequest: null`, ready check) and reconnects by itself, to
 * a promoted replica too. A Cluster routes each command (and each Lua script, by its first key)
 * to its slot's master. Close it with `quit()` once the workers using it have stopped.
 *
 * @example
 * ```ts
 * const redis = connectRedis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
 * // … startWorker({ redis, … }), then worker.stop()
 * await redis.quit();
 * ```
 */
export function connectRedis(url: string, options: ConnectOptions = {}): RedisClient {
  return connectDeployment(parseRedisUrl(url), options);
}

/** {@link connectRedis} for a deployment already parsed. */
export function connectDeployment(d: RedisDeployment, options: ConnectOptions = {}): RedisClient {
  const { failFast = false, shardedSubscribers = false, ...rest } = options;
  const node: RedisOptions = {
    maxRetriesPerRequest: failFast ? 0 : null,
    enableReadyCheck: true,
    ...(d.username ? { username: d.username } : {}),
    ...(d.password ? { password: d.password } : {}),
    ...(d.tls ? { tls: {} } : {}),
    ...(failFast ? { connectTimeout: 2_000 } : {}),
    ...rest,
  };
  const noRetry = failFast ? { retryStrategy: () => null, enableOfflineQueue: false } : {};
  if (d.kind === 'single') {
    return new Redis({
      ...node,
      host: d.endpoint.host,
      port: d.endpoint.port,
      db: d.db,
      ...noRetry,
    });
  }
  if (d.kind === 'sentinel') {
    return new Redis({
      ...node,
      ...noRetry,
      sentinels: d.sentinels.map((e) => ({ ...e })),
      name: d.masterName,
      db: d.db,
      role: 'master',
      // Not ioredis's failoverDetector: a +switch-master heard while the client is still
      // reconnecting ends it for good (status `end`, every command "Connection is closed").
      // Sentinel closes a demoted master's clients (CLIENT KILL), and a dead master's sockets
      // fail: either way the client asks the sentinels again and finds the promoted replica.
      failoverDetector: false,
      ...(d.sentinelUsername ? { sentinelUsername: d.sentinelUsername } : {}),
      ...(d.sentinelPassword ? { sentinelPassword: d.sentinelPassword } : {}),
      ...(d.tls ? { enableTLSForSentinelMode: true } : {}),
      sentinelRetryStrategy: failFast
        ? () => null
        : (times: number) => Math.min(100 * times, 2_000),
      // Each attempt asks the sentinels first: a promoted replica is found within half a second.
      ...(failFast
        ? {}
        : {
            retryStrategy: (times: number) => Math.min(50 * times, 500),
            reconnectOnError: reconnectOnReadonly,
          }),
    });
  }
  const { lazyConnect, ...perNode } = node;
  const cluster: ClusterOptions = {
    enableReadyCheck: true,
    shardedSubscribers,
    redisOptions: perNode as ClusterOptions['redisOptions'],
    ...(lazyConnect ? { lazyConnect } : {}),
    clusterRetryStrategy: failFast ? () => null : (times: number) => Math.min(100 * times, 2_000),
    ...(failFast ? { enableOfflineQueue: false, maxRedirections: 4 } : {}),
    // Certificates name hosts, not the IPs CLUSTER SLOTS answers with (as on ElastiCache).
    ...(d.tls ? { dnsLookup: (address, done) => done(null, address) } : {}),
  };
  return new Cluster(
    d.seeds.map((e) => ({ ...e })),
    cluster,
  );
}

/**
 * A second connection to the same deployment, with the same options (`node` overrides some, on
 * each node of a Cluster). `shardedSubscribers` for one that SSUBSCRIBEs: on a Cluster it then
 * keeps one subscriber per master, across failovers.
 */
export function duplicateRedis(
  redis: RedisClient,
  options: { readonly shardedSubscribers?: boolean; readonly node?: Partial<RedisOptions> } = {},
): RedisClient {
  if (!isCluster(redis)) return redis.duplicate(options.node);
  return redis.duplicate([], {
    shardedSubscribers: options.shardedSubscribers ?? false,
    ...(options.node ? { redisOptions: options.node } : {}),
  });
}

/** Where a client connects, as a URL without its password, for messages. */
export function describeRedis(redis: RedisClient): string {
  const hostPort = (o: { host?: string | undefined; port?: number | undefined }) =>
    `${o.host ?? '127.0.0.1'}:${o.port ?? 6379}`;
  if (isCluster(redis)) {
    return `redis+cluster://${redis
      .nodes('master')
      .map((n) => hostPort(n.options))
      .join(',')}`;
  }
  const o = redis.options;
  if (o.sentinels?.length) {
    return `redis+sentinel://${o.sentinels.map((s) => hostPort(s)).join(',')}/${o.name ?? ''}`;
  }
  return `redis://${hostPort(o)}`;
}

/**
 * Resolves once `redis` is ready for commands: a client without an offline queue refuses the
 * commands sent before. Waits as long as it takes; callers bound it.
 */
export async function untilReady(redis: RedisClient): Promise<void> {
  if (redis.status === 'ready') return;
  await new Promise<void>((resolve) => redis.once('ready', () => resolve()));
}

const OOM = /^OOM /;

/**
 * True for Redis's refusals at its `maxmemory`: `-OOM` on a command or script, and `EXECABORT`
 * of a transaction whose commands were refused for it (Redis refuses every command queued in a
 * MULTI while out of memory; ioredis lists them as `previousErrors`). Either way Redis wrote
 * nothing of that command or transaction.
 */
export function isOutOfMemory(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  if (err instanceof RedisOutOfMemoryError || OOM.test(err.message)) return true;
  if (!err.message.startsWith('EXECABORT')) return false;
  const before = (err as { previousErrors?: unknown[] }).previousErrors ?? [];
  // With no cause given, a transaction of llmq's is refused whole only for memory.
  return before.length === 0 || before.some((e) => e instanceof Error && OOM.test(e.message));
}

/**
 * The typed error for one of Redis's refusals that has a name ({@link isOutOfMemory}), or
 * undefined: for the places that turn errors into answers or one line in the CLI.
 */
export function namedRedisError(err: unknown, url: string): LlmqError | undefined {
  if (err instanceof RedisOutOfMemoryError) return err;
  return isOutOfMemory(err) ? new RedisOutOfMemoryError(url, { cause: err }) : undefined;
}

/** Whether a client is a Cluster (its keys spread over several masters). */
export function isCluster(redis: RedisClient): redis is Cluster {
  return redis instanceof Cluster;
}

/**
 * Runs `fn` on every master: the one connection of a single node or Sentinel, each master's
 * connection on a Cluster. For what a master answers only about its own keys (SCAN, INFO, DBSIZE).
 */
export async function forEachMaster<T>(
  redis: RedisClient,
  fn: (master: Redis) => Promise<T>,
): Promise<T[]> {
  if (!isCluster(redis)) return [await fn(redis)];
  if (redis.status !== 'ready') await redis.ping(); // nodes() is empty until the slots are known
  return Promise.all(redis.nodes('master').map(fn));
}

/**
 * Deletes every key matching a pattern with SCAN + UNLINK on every master (never FLUSHDB: a
 * shared Redis holds other people's keys); resolves with how many were deleted.
 */
export async function deleteKeysMatching(redis: RedisClient, pattern: string): Promise<number> {
  const cluster = isCluster(redis);
  const counts = await forEachMaster(redis, async (master) => {
    let deleted = 0;
    for await (const keys of scanKeys(master, pattern)) {
      if (keys.length === 0) continue;
      if (!cluster) {
        deleted += await master.unlink(...keys);
        continue;
      }
      // A node refuses a multi-key command across slots (CROSSSLOT): one UNLINK per key.
      const pipe = master.pipeline();
      for (const key of keys) pipe.unlink(key);
      for (const [err, n] of (await pipe.exec()) ?? []) if (!err) deleted += Number(n);
    }
    return deleted;
  });
  return counts.reduce((a, b) => a + b, 0);
}

/** How many keys match a pattern, over every master. */
export async function countKeysMatching(redis: RedisClient, pattern: string): Promise<number> {
  const counts = await forEachMaster(redis, async (master) => {
    let n = 0;
    for await (const keys of scanKeys(master, pattern)) n += keys.length;
    return n;
  });
  return counts.reduce((a, b) => a + b, 0);
}

async function* scanKeys(master: Redis, pattern: string): AsyncGenerator<string[]> {
  let cursor = '0';
  do {
    const [next, keys] = await master.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    yield keys;
  } while (cursor !== '0');
}

/**
 * Checks once, with a deadline, that the deployment `url` names answers and is the kind the
 * URL says, so a CLI prints one clear line instead of retrying forever. Throws
 * {@link RedisUnavailableError} when nothing answers, {@link ConfigError} when something
 * answers but the URL is wrong for it (a cluster node behind redis://, a master name the
 * sentinels do not know).
 */
export async function assertRedis(url: string, timeoutMs = 2_000): Promise<void> {
  const d = parseRedisUrl(url);
  if (d.kind === 'cluster') await checkSeeds(d, timeoutMs);
  if (d.kind === 'sentinel') await checkSentinels(d, timeoutMs);
  const client = connectDeployment(d, {
    failFast: true,
    lazyConnect: true,
    connectTimeout: timeoutMs,
  });
  let cause: unknown;
  client.on('error', (err) => {
    cause ??= err;
  });
  try {
    await withDeadline(timeoutMs, async () => {
      await client.connect();
      if (d.kind === 'single') checkMode(d, await serverMode(client as Redis), 'standalone');
      await client.ping();
    });
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    throw new RedisUnavailableError(url, detailOf(cause ?? err), { cause: err });
  } finally {
    client.disconnect();
  }
}

/** A single node must not be a cluster node (MOVED on most keys) nor a sentinel. */
function checkMode(d: RedisDeployment, mode: string, want: string): void {
  if (mode === want) return;
  const hosts = describeHosts(d);
  const tls = d.tls ? 's' : '';
  if (mode === 'cluster') {
    throw new ConfigError(
      `REDIS_URL ${d.redacted}: ${hosts} is a Redis Cluster node; use redis${tls}+cluster://${hosts}`,
    );
  }
  if (mode === 'sentinel') {
    throw new ConfigError(
      `REDIS_URL ${d.redacted}: ${hosts} is a Sentinel; use redis${tls}+sentinel://${hosts}/mastername`,
    );
  }
  throw new ConfigError(
    `REDIS_URL ${d.redacted}: ${hosts} is a single Redis, not a cluster (cluster support is ` +
      `disabled); use redis${tls}://${hosts.split(', ')[0]}`,
  );
}

/** Asks each seed what it is: a cluster URL pointed at a single node says so. */
async function checkSeeds(d: RedisDeployment & { kind: 'cluster' }, timeoutMs: number) {
  const answers = await Promise.all(d.seeds.map((seed) => onNode(d, seed, timeoutMs, serverMode)));
  const mode = answers.find((a) => typeof a === 'string');
  if (mode === undefined) {
    throw new RedisUnavailableError(
      d.redacted,
      `none of the seed nodes ${describeHosts(d)} answered: ${detailOf(answers[0])}`,
    );
  }
  checkMode(d, mode, 'cluster');
}

/** Asks each sentinel for the master: a name none of them knows says so, with the names they know. */
async function checkSentinels(d: RedisDeployment & { kind: 'sentinel' }, timeoutMs: number) {
  const auth = { ...d, username: d.sentinelUsername, password: d.sentinelPassword };
  const answers = await Promise.all(
    d.sentinels.map((s) =>
      onNode(auth, s, timeoutMs, async (r) => {
        const addr = await r.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', d.masterName);
        if (addr) return { known: true, names: [] as string[] };
        const masters = (await r.call('SENTINEL', 'MASTERS')) as string[][];
        return { known: false, names: masters.map((m) => m[m.indexOf('name') + 1] ?? '?') };
      }),
    ),
  );
  const answered = answers.filter((a): a is Exclude<typeof a, Error> => !(a instanceof Error));
  if (answered.some((a) => a.known)) return;
  if (answered.length > 0) {
    const names = [...new Set(answered.flatMap((a) => a.names))];
    throw new ConfigError(
      `REDIS_URL ${d.redacted}: the sentinels know no master named "${d.masterName}"` +
        (names.length ? ` (they know: ${names.join(', ')})` : ' (they monitor none)') +
        '; put the name from "sentinel monitor" after the last / of REDIS_URL',
    );
  }
  const first = answers[0] as Error;
  if (/unknown command/i.test(first.message)) {
    throw new ConfigError(
      `REDIS_URL ${d.redacted}: ${describeHosts(d)} is not a Sentinel (it refused SENTINEL); ` +
        'list the sentinels, not the master',
    );
  }
  throw new RedisUnavailableError(
    d.redacted,
    `none of the sentinels ${describeHosts(d)} answered: ${detailOf(first)}`,
  );
}

/** Runs `fn` on a fail-fast connection to one node; resolves with its error instead of throwing. */
async function onNode<T>(
  auth: Pick<RedisDeployment, 'username' | 'password' | 'tls' | 'redacted'>,
  at: RedisEndpoint,
  timeoutMs: number,
  fn: (r: Redis) => Promise<T>,
): Promise<T | Error> {
  const r = connectDeployment(
    {
      kind: 'single',
      endpoint: at,
      db: 0,
      username: auth.username,
      password: auth.password,
      tls: auth.tls,
      redacted: auth.redacted,
    },
    { failFast: true, lazyConnect: true, connectTimeout: timeoutMs },
  ) as Redis;
  let cause: Error | undefined;
  r.on('error', (err: Error) => {
    cause ??= err;
  });
  try {
    return await withDeadline(timeoutMs, async () => {
      await r.connect();
      return fn(r);
    });
  } catch (err) {
    return (cause ?? err) as Error;
  } finally {
    r.disconnect();
  }
}

/** `standalone`, `cluster` or `sentinel`, from INFO server. */
async function serverMode(r: Redis): Promise<string> {
  const info = await r.info('server');
  return /^redis_mode:(\w+)/m.exec(info)?.[1] ?? 'standalone';
}

function withDeadline<T>(ms: number, fn: () => Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    fn(),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

function detailOf(err: unknown): string {
  const e = err as NodeJS.ErrnoException | undefined;
  const detail = e?.code ?? e?.message ?? String(err);
  if (detail === 'ECONNREFUSED') return 'connection refused';
  if (detail === 'ENOTFOUND') return 'host not found';
  if (detail === 'ETIMEDOUT') return 'timed out';
  return detail;
}
