/**
 * The dashboard's probes, open without credentials (they tell nothing but whether it works):
 * `GET /healthz` answers while the process serves; `GET /readyz` while Redis answers too.
 */
import type { FastifyInstance } from 'fastify';
import { probeAnswer, redisSilence, verdict } from '../shared/probes.ts';
import type { RedisClient } from '../shared/redis.ts';

/** The paths the access guard lets through. */
export const PROBE_PATHS: ReadonlySet<string> = new Set(['/healthz', '/readyz']);

/** Registers `/healthz` and `/readyz` on the dashboard's app. */
export function registerProbes(app: FastifyInstance, redis: RedisClient, redisTimeoutMs = 2_000) {
  app.get('/healthz', async (_req, reply) => {
    const a = probeAnswer(verdict([]), { ok: 'ok', failing: 'failing' });
    return reply.code(a.status).header('cache-control', 'no-store').send(a.body);
  });
  app.get('/readyz', async (_req, reply) => {
    const silence = await redisSilence(redis, redisTimeoutMs);
    const a = probeAnswer(verdict(silence ? [silence] : []), { ok: 'ready', failing: 'not ready' });
    return reply.code(a.status).header('cache-control', 'no-store').send(a.body);
  });
}
