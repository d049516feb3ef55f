import { describe, expect, it } from 'vitest';
import { ConfigError, redactUrl } from '../shared/errors.ts';
import { parseRedisUrl } from '../shared/redis-url.ts';

describe('REDIS_URL', () => {
  it('names a single node, with TLS, auth and database as the URL says', () => {
    expect(parseRedisUrl('redis://127.0.0.1:6380/2')).toMatchObject({
      kind: 'single',
      endpoint: { host: '127.0.0.1', port: 6380 },
      db: 2,
      tls: false,
    });
    expect(parseRedisUrl('rediss://app:p%40ss@redis.internal')).toMatchObject({
      kind: 'single',
      endpoint: { host: 'redis.internal', port: 6379 },
      username: 'app',
      password: 'p@ss',
      tls: true,
    });
    expect(parseRedisUrl('redis://[::1]:7000')).toMatchObject({
      endpoint: { host: '::1', port: 7000 },
    });
  });

  it('names a cluster by its seed nodes', () => {
    expect(parseRedisUrl('rediss+cluster://:pw@a:7000,b:7001,c')).toMatchObject({
      kind: 'cluster',
      seeds: [
        { host: 'a', port: 7000 },
        { host: 'b', port: 7001 },
        { host: 'c', port: 6379 },
      ],
      password: 'pw',
      tls: true,
    });
  });

  it('names a Sentinel master by its sentinels and name, sentinel auth as an option', () => {
    expect(
      parseRedisUrl('redis+sentinel://u:pw@s1,s2:26380/mymaster?db=3&sentinelPassword=spw'),
    ).toMatchObject({
      kind: 'sentinel',
      sentinels: [
        { host: 's1', port: 26379 },
        { host: 's2', port: 26380 },
      ],
      masterName: 'mymaster',
      db: 3,
      username: 'u',
      password: 'pw',
      sentinelPassword: 'spw',
    });
  });

  it.each([
    ['http://a:6379', /unknown scheme "http:"; use redis:\/\/host:6379/],
    ['localhost:6379', /not a URL/],
    ['redis+cluster://', /no host/],
    ['redis+cluster://a:7000,b:70000', /bad port "70000" for host b/],
    ['redis://a:x', /bad port "x"/],
    ['redis+sentinel://s1:26379,s2:26379', /no master name; end the URL with \/mastername/],
    ['redis+sentinel://s1/', /no master name/],
    ['redis://a:1,b:2', /2 hosts for one node; for a cluster use redis\+cluster:\/\//],
    ['redis+cluster://a:1/3', /a cluster has only database 0/],
    ['redis://a/x', /bad database "x"/],
    ['redis+cluster://a:1?db=2', /unknown option "db"; redis\+cluster:\/\/ takes none/],
    ['redis://a?sentinelPassword=x', /unknown option "sentinelPassword"; redis:\/\/ takes db/],
  ])('refuses %s with what to write instead', (url, message) => {
    expect(() => parseRedisUrl(url)).toThrow(ConfigError);
    expect(() => parseRedisUrl(url)).toThrow(message);
  });

  it('never prints a password, of the nodes or of the sentinels', () => {
    const urls = [
      'redis+cluster://app:hunter2@a:1,b:x',
      'redis+sentinel://:hunter2@s1:1/m?sentinelPassword=hunter2&bogus=1',
      'rediss://app:hunter2@a:99999',
    ];
    for (const url of urls) {
      let message = '';
      try {
        parseRedisUrl(url);
      } catch (err) {
        message = (err as Error).message;
      }
      expect(message).toMatch(/^REDIS_URL \S+:\/\/[^ ]*\*\*\*/);
      expect(message).not.toContain('hunter2');
    }
    expect(redactUrl('redis+cluster://app:hunter2@a:1,b:2')).toBe(
      'redis+cluster://app:***@a:1,b:2',
    );
  });
});
