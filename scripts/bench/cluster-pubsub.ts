/**
 * Measures the limiter's wake-up on a Redis deployment: a Lua script (as settle/observe do)
 * publishes on the queue's hash-tagged channel, a subscriber hears it. Plain PUBLISH (which a
 * Cluster copies to every node over its bus) against SPUBLISH (which stays on the slot's
 * shard). Prints round trips and the cluster-bus messages each sent.
 *
 *   npx tsx scripts/bench/cluster-pubsub.ts redis+cluster://127.0.0.1:7000 [rounds]
 *
 * Not a test: figures for the wiring of the limiter onto a cluster.
 */
import { performance } from 'node:perf_hooks';
import { connectRedis, deleteKeysMatching, forEachMaster, isCluster } from '../../shared/redis.ts';

type Mode = 'PUBLISH' | 'SPUBLISH';

const LUA = (cmd: Mode) =>
  `redis.call('INCR', KEYS[1]) redis.call('${cmd}', ARGV[1], ARGV[2]) return 1`;

/** Cluster-bus publish messages sent, summed over every node that answers. */
async function busMessages(url: string): Promise<number> {
  const redis = connectRedis(url);
  try {
    if (!isCluster(redis)) return 0;
    await redis.ping();
    let total = 0;
    for (const node of redis.nodes('all')) {
      const info = (await node.cluster('INFO')) as string;
      for (const m of info.matchAll(/^cluster_stats_messages_publish(?:shard)?_sent:(\d+)/gm))
        total += Number(m[1]);
    }
    return total;
  } finally {
    redis.disconnect();
  }
}

async function measure(url: string, mode: Mode, rounds: number) {
  const tag = `llmqbench-pubsub-${process.pid}:{q${mode}}`;
  const channel = `${tag}:limiter:wake`;
  const pub = connectRedis(url);
  const sub = connectRedis(url, { shardedSubscribers: mode === 'SPUBLISH' });
  const heard = new Map<string, () => void>();
  const onMessage = (_ch: string, message: string) => heard.get(message)?.();
  sub.on(mode === 'SPUBLISH' ? 'smessage' : 'message', onMessage);
  if (mode === 'SPUBLISH') await sub.ssubscribe(channel);
  else await sub.subscribe(channel);
  const bus0 = await busMessages(url);
  const times: number[] = [];
  const t0 = performance.now();
  for (let i = 0; i < rounds; i++) {
    const id = String(i);
    const start = performance.now();
    const got = new Promise<void>((resolve) => heard.set(id, resolve));
    await pub.eval(LUA(mode), 1, `${tag}:n`, channel, id);
    await got;
    heard.delete(id);
    times.push(performance.now() - start);
  }
  const elapsed = performance.now() - t0;
  const bus = (await busMessages(url)) - bus0;
  sub.disconnect();
  await deleteKeysMatching(pub, `${tag}:*`);
  pub.disconnect();
  times.sort((a, b) => a - b);
  const at = (q: number) => times[Math.min(times.length - 1, Math.floor(q * times.length))]!;
  return {
    mode,
    rounds,
    'p50 ms': at(0.5).toFixed(3),
    'p99 ms': at(0.99).toFixed(3),
    'per s': Math.round((rounds / elapsed) * 1000),
    'bus msgs/wake': (bus / rounds).toFixed(2),
  };
}

async function main() {
  const url = process.argv[2] ?? process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379';
  const rounds = Number(process.argv[3] ?? 2000);
  const probe = connectRedis(url);
  const masters = (await forEachMaster(probe, async () => 1)).length;
  probe.disconnect();
  const rows = [];
  for (const mode of ['PUBLISH', 'SPUBLISH', 'PUBLISH', 'SPUBLISH'] as const) {
    rows.push(await measure(url, mode, rounds));
  }
  console.log(`${url} (${masters} master${masters === 1 ? '' : 's'})`);
  console.table(rows);
}

await main();
