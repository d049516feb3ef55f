import { ConfigError, redactUrl } from './errors.ts';

/** One host and port of a Redis deployment. */
export interface RedisEndpoint {
  readonly host: string;
  readonly port: number;
}

interface Auth {
  readonly username?: string | undefined;
  readonly password?: string | undefined;
  /** TLS to the Redis nodes (`rediss…` schemes). */
  readonly tls: boolean;
  /** The URL with its password hidden, for messages. */
  readonly redacted: string;
}

/** One Redis server: `redis://[user:pass@]host[:port][/db]`, `rediss://` for TLS. */
export interface SingleRedis extends Auth {
  readonly kind: 'single';
  readonly endpoint: RedisEndpoint;
  readonly db: number;
}

/** A Redis Cluster reached through seed nodes: `redis+cluster://host:port,host:port`. */
export interface ClusterRedis extends Auth {
  readonly kind: 'cluster';
  readonly seeds: readonly RedisEndpoint[];
}

/** A master found through Sentinel: `redis+sentinel://host:port,host:port/mastername`. */
export interface SentinelRedis extends Auth {
  readonly kind: 'sentinel';
  readonly sentinels: readonly RedisEndpoint[];
  readonly masterName: string;
  readonly db: number;
  readonly sentinelUsername?: string | undefined;
  readonly sentinelPassword?: string | undefined;
}

/** What a `REDIS_URL` names. */
export type RedisDeployment = SingleRedis | ClusterRedis | SentinelRedis;

const SCHEMES: Record<string, { kind: RedisDeployment['kind']; tls: boolean }> = {
  redis: { kind: 'single', tls: false },
  rediss: { kind: 'single', tls: true },
  'redis+cluster': { kind: 'cluster', tls: false },
  'rediss+cluster': { kind: 'cluster', tls: true },
  'redis+sentinel': { kind: 'sentinel', tls: false },
  'rediss+sentinel': { kind: 'sentinel', tls: true },
};

/** Query options each kind accepts (anything else is a typo worth an error). */
const OPTIONS: Record<RedisDeployment['kind'], readonly string[]> = {
  single: ['db'],
  cluster: [],
  sentinel: ['db', 'sentinelUsername', 'sentinelPassword'],
};

const FORMS =
  'redis://host:6379, rediss://host:6379, redis+cluster://host:port,host:port or ' +
  'redis+sentinel://host:port,host:port/mastername';

/**
 * Reads a `REDIS_URL` into what it names. Throws {@link ConfigError} with the URL (password
 * hidden) and the accepted forms when it names nothing usable.
 */
export function parseRedisUrl(url: string): RedisDeployment {
  const redacted = redactUrl(url);
  const fail = (what: string): never => {
    throw new ConfigError(`REDIS_URL ${redacted}: ${what}`);
  };
  const m = /^([a-z][a-z0-9+.-]*):\/\/(.*)$/is.exec(url.trim());
  if (!m) return fail(`not a URL; use ${FORMS}`);
  const scheme = m[1]!.toLowerCase();
  const form = SCHEMES[scheme];
  if (!form) return fail(`unknown scheme "${scheme}:"; use ${FORMS}`);
  let rest = m[2]!;

  // Userinfo ends at the last '@' (a password may hold one, though it should be %40).
  const at = rest.lastIndexOf('@');
  let username: string | undefined;
  let password: string | undefined;
  if (at >= 0) {
    const info = rest.slice(0, at);
    rest = rest.slice(at + 1);
    const colon = info.indexOf(':');
    username = decode(colon >= 0 ? info.slice(0, colon) : info, 'user name', fail) || undefined;
    password =
      colon >= 0 ? decode(info.slice(colon + 1), 'password', fail) || undefined : undefined;
  }

  const q = rest.indexOf('?');
  const query = new URLSearchParams(q >= 0 ? rest.slice(q + 1) : '');
  if (q >= 0) rest = rest.slice(0, q);
  const slash = rest.indexOf('/');
  const hostList = slash >= 0 ? rest.slice(0, slash) : rest;
  const path = slash >= 0 ? decode(rest.slice(slash + 1), 'path', fail) : '';

  for (const key of query.keys()) {
    const known = OPTIONS[form.kind];
    if (!known.includes(key)) {
      fail(
        `unknown option "${key}"` +
          (known.length ? `; ${scheme}:// takes ${known.join(', ')}` : `; ${scheme}:// takes none`),
      );
    }
  }

  const defaultPort = form.kind === 'sentinel' ? 26379 : 6379;
  const hosts =
    hostList === '' ? [] : hostList.split(',').map((h) => endpoint(h, defaultPort, fail));
  if (hosts.length === 0) fail('no host; name at least one host:port');
  const base = { username, password, tls: form.tls, redacted };

  if (form.kind === 'single') {
    if (hosts.length > 1) {
      fail(
        `${hosts.length} hosts for one node; for a cluster use redis+cluster://host:port,host:port`,
      );
    }
    const db = dbNumber(query.get('db') ?? (path || '0'), fail);
    return { kind: 'single', endpoint: hosts[0]!, db, ...base };
  }
  if (form.kind === 'cluster') {
    if (path !== '' && path !== '0') fail(`a cluster has only database 0, got "/${path}"`);
    return { kind: 'cluster', seeds: hosts, ...base };
  }
  if (path === '') {
    fail('no master name; end the URL with /mastername (as in sentinel.conf "sentinel monitor")');
  }
  if (path.includes('/')) fail(`master name "${path}" holds a "/"; put db in ?db=N`);
  return {
    kind: 'sentinel',
    sentinels: hosts,
    masterName: path,
    db: dbNumber(query.get('db') ?? '0', fail),
    sentinelUsername: query.get('sentinelUsername') || undefined,
    sentinelPassword: query.get('sentinelPassword') || undefined,
    ...base,
  };
}

function endpoint(text: string, defaultPort: number, fail: (what: string) => never): RedisEndpoint {
  // `[::1]:6379` for IPv6; `host` or `host:port` otherwise.
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+))(?::(.*))?$/.exec(text.trim());
  if (!m) return fail(`bad host "${text}"; write host:port`);
  const host = (m[1] ?? m[2])!;
  if (m[3] === undefined) return { host, port: defaultPort };
  const port = Number(m[3]);
  if (!/^\d+$/.test(m[3]) || port < 1 || port > 65535) {
    fail(`bad port "${m[3]}" for host ${host}; a port is a number from 1 to 65535`);
  }
  return { host, port };
}

function dbNumber(text: string, fail: (what: string) => never): number {
  const db = Number(text);
  if (!/^\d+$/.test(text) || db > 65535)
    fail(`bad database "${text}"; a database is a number from 0 up`);
  return db;
}

function decode(text: string, what: string, fail: (what: string) => never): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return fail(`the ${what} is not valid percent-encoding`);
  }
}

/** The deployment's nodes as `host:port` text, for messages (`a:1, b:2`). */
export function describeHosts(d: RedisDeployment): string {
  const list = d.kind === 'single' ? [d.endpoint] : d.kind === 'cluster' ? d.seeds : d.sentinels;
  return list
    .map((e) => (e.host.includes(':') ? `[${e.host}]:${e.port}` : `${e.host}:${e.port}`))
    .join(', ');
}
