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
import type { JobData } from '../shared/job.ts';
import { modelOf, type StoredJobData } from '../shared/job-kept.ts';
import { QueueAdapter } from './board-adapters.ts';
import { serveBoardPage } from './board-page.ts';
import { DeadLetterAdapter } from './dead-letter-adapter.ts';
import type { FleetReader } from './fleet-reader.ts';
import { displayData } from './job-display.ts';

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

/** A job's name in Bull Board's lists: its model and tenant (every llmq job is `messages`). */
function jobTitle(data: StoredJobData | undefined): string {
  const model = modelOf(data) ?? 'messages';
  return data?.tenant ? `${model} · ${data.tenant}` : model;
}

/** A queue's two adapters: its jobs, and its dead letters. */
function queueAdapters(options: BoardOptions, name: string): readonly BullMQAdapter[] {
  const { reader } = options;
  const readOnlyMode = options.readOnly ?? false;
  const { queue, dead } = reader.queues(name);
  const names = { prefix: reader.prefix, queue: name };
  const main = new QueueAdapter(queue, reader.redis, names, () => options.producerFor(name), {
    readOnlyMode,
    description: `llmq queue ${name}: its dead-lettered jobs are under ${name}-dead`,
  });
  const letters = new DeadLetterAdapter(dead, queue, {
    readOnlyMode,
    description: `dead letters of ${name}: the original request, the reason and the attempts`,
  });
  for (const a of [main, letters]) a.setFormatter('data', (data: unknown) => displayData(data));
  main.setFormatter('name', (job: { data?: StoredJobData }) => jobTitle(job.data));
  letters.setFormatter('name', (job: { data?: { data?: JobData } }) => jobTitle(job.data?.data));
  return [main, letters];
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
        miscLinks: [
          { text: 'Overview (llmq)', url: 'overview' },
          { text: 'Limiter (live budget view)', url: 'limiter' },
        ],
        hideDocsLink: true,
      },
    },
  });
  const adapters = new Map<string, readonly BullMQAdapter[]>();
  const adaptersOf = (name: string): readonly BullMQAdapter[] => {
    let pair = adapters.get(name);
    if (!pair) {
      pair = queueAdapters(options, name);
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
  serveBoardPage(app, readOnly);
  await app.register(serverAdapter.registerPlugin());
  await refresh(true);
  return {
    refresh,
    get queues() {
      return queues;
    },
  };
}
