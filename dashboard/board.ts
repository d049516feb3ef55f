/**
 * Bull Board for every llmq queue under the prefix, and the dead-letter queue of each. The set
 * of queues is re-read from the registry periodically and whenever the UI asks for the list,
 * so a queue that appears later shows up without a restart.
 */

import { createBullBoard } from '@bull-board/api';
import type { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { FastifyAdapter } from '@bull-board/fastify';
import type { FastifyInstance } from 'fastify';
import type { Producer } from '../producer/producer.ts';
import { DeadLetterAdapter, QueueAdapter } from './board-adapters.ts';
import type { FleetReader } from './fleet-reader.ts';

export interface BoardOptions {
  readonly reader: FleetReader;
  /** Hide and refuse retry, promote, clean and every other action. @default false */
  readonly readOnly?: boolean;
  /** The shortest time between two reads of the registry. @default 1_000 */
  readonly minRescanMs?: number;
  /** The producer that adds a queue's jobs from Bull Board ("add job"), validated as any enqueue. */
  readonly producerFor: (queue: string) => Producer;
}

export interface Board {
  /** Re-reads the registry (at most once per `minRescanMs`); resolves with the queue names. */
  refresh(force?: boolean): Promise<readonly string[]>;
  /** The queue names seen at the last refresh. */
  readonly queues: readonly string[];
}

/** Field names whose values are credentials: shown as `[redacted]` in job data. */
const SECRET_FIELDS = new Set([
  'apikey',
  'api_key',
  'x-api-key',
  'anthropic_api_key',
  'authorization',
  'password',
  'secret',
  'token',
  'access_token',
  'refresh_token',
]);

/** A copy of job data with credential-looking fields blanked, however deep. */
export function redactSecrets(value: unknown, depth = 0): unknown {
  if (depth > 20 || value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map((v) => redactSecrets(v, depth + 1));
  return Object.fromEntries(
    Object.entries(value as Record<string, unknown>).map(([k, v]) => [
      k,
      SECRET_FIELDS.has(k.toLowerCase()) ? '[redacted]' : redactSecrets(v, depth + 1),
    ]),
  );
}

/** Registers Bull Board at `/` of `app` (its UI, its static files and its `/api/queues…`). */
export async function mountBoard(app: FastifyInstance, options: BoardOptions): Promise<Board> {
  const { reader } = options;
  const readOnly = options.readOnly ?? false;
  const minRescanMs = options.minRescanMs ?? 1_000;
  const serverAdapter = new FastifyAdapter();
  serverAdapter.setBasePath('/');
  const board = createBullBoard({
    queues: [],
    serverAdapter,
    options: {
      uiConfig: {
        boardTitle: 'llmq',
        miscLinks: [{ text: 'Limiter (live budget view)', url: 'limiter' }],
        hideDocsLink: true,
        ...(readOnly
          ? { environment: { label: 'read-only', color: '#6b7280', textColor: '#ffffff' } }
          : {}),
      },
    },
  });
  const adapters = new Map<string, readonly BullMQAdapter[]>();
  const adaptersOf = (name: string): readonly BullMQAdapter[] => {
    let pair = adapters.get(name);
    if (!pair) {
      const { queue, dead } = reader.queues(name);
      const main = new QueueAdapter(queue, () => options.producerFor(name), {
        readOnlyMode: readOnly,
        description: `llmq queue ${name}`,
      });
      const letters = new DeadLetterAdapter(dead, {
        readOnlyMode: readOnly,
        description: `dead letters of ${name}: the original request, the reason and the attempts`,
      });
      for (const a of [main, letters])
        a.setFormatter('data', (data: unknown) => redactSecrets(data));
      pair = [main, letters];
      adapters.set(name, pair);
    }
    return pair;
  };

  let queues: readonly string[] = [];
  let lastScan = 0;
  let inFlight: Promise<readonly string[]> | undefined;
  const scan = async (): Promise<readonly string[]> => {
    const names = await reader.listQueues();
    for (const gone of [...adapters.keys()].filter((n) => !names.includes(n)))
      adapters.delete(gone);
    board.replaceQueues(names.flatMap(adaptersOf));
    await reader.forget(names);
    queues = names;
    lastScan = Date.now();
    return names;
  };
  const refresh = (force = false): Promise<readonly string[]> => {
    if (inFlight) return inFlight;
    if (!force && Date.now() - lastScan < minRescanMs) return Promise.resolve(queues);
    inFlight = scan().finally(() => {
      inFlight = undefined;
    });
    return inFlight;
  };

  // The UI polls the list of queues: that is the moment to look for new ones.
  app.addHook('onRequest', async (req) => {
    if (
      req.method === 'GET' &&
      (req.url === '/' || req.url.startsWith('/api/queues?') || req.url === '/api/queues')
    ) {
      await refresh();
    }
  });
  await app.register(serverAdapter.registerPlugin());
  await refresh(true);
  return {
    refresh,
    get queues() {
      return queues;
    },
  };
}
