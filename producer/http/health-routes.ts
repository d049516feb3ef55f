/**
 * `llmq serve`'s probes, public as `/openapi.json` is: `GET /healthz` answers while the process
 * serves (its event loop turns); `GET /readyz` while Redis answers and the server is not closing.
 */
import { probeAnswer, redisSilence, verdict } from '../../shared/probes.ts';
import type { RedisClient } from '../../shared/redis.ts';
import type { Route } from './handlers.ts';

/** The probe routes of a server whose Redis is `redis` and whose closing `shutdown` signals. */
export function healthRoutes(o: {
  readonly redis: RedisClient;
  readonly shutdown: AbortSignal;
  /** How long /readyz waits for Redis's PING. @default 2_000 */
  readonly redisTimeoutMs?: number;
}): Route[] {
  const ready = async () => {
    if (o.shutdown.aborted) return verdict(['closing: it takes no new requests']);
    const silence = await redisSilence(o.redis, o.redisTimeoutMs ?? 2_000);
    return verdict(silence ? [silence] : []);
  };
  const noStore = { 'cache-control': 'no-store' };
  return [
    {
      method: 'GET',
      path: '/healthz',
      handler: async () => ({
        ...probeAnswer(verdict([]), { ok: 'ok', failing: 'failing' }),
        headers: noStore,
      }),
    },
    {
      method: 'GET',
      path: '/readyz',
      handler: async () => ({
        ...probeAnswer(await ready(), { ok: 'ready', failing: 'not ready' }),
        headers: noStore,
      }),
    },
  ];
}
