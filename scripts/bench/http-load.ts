import { Agent, request } from 'node:http';

/**
 * Closed-loop HTTP clients on loopback: each of `clients` sends a request, waits for its
 * answer, and sends the next, until the time is up. One keep-alive connection per client
 * (node:http's Agent sized for all of them: no dependency beyond Node).
 */
export interface HttpLoadOptions {
  /** `http://127.0.0.1:port`; nothing but loopback is accepted. */
  readonly url: string;
  readonly path: string;
  readonly clients: number;
  readonly durationMs: number;
  /** Clients start spread over this long, not in one burst of connects. @default 1_000 */
  readonly rampMs?: number;
  /** Client `i` sends `Authorization: Bearer keys[i % keys.length]`. */
  readonly keys: readonly string[];
  /** The JSON body of client `i`'s `n`-th request. */
  readonly body: (i: number, n: number) => unknown;
  /** One request's limit, then it counts as `timeout`. @default 30_000 */
  readonly timeoutMs?: number;
}

export interface HttpLoadResult {
  readonly requests: number;
  /** From the first request sent to the last answer. */
  readonly wallMs: number;
  /** Of every request that was answered (any status), in ms. */
  readonly latenciesMs: readonly number[];
  /** Answers by status (`202`, `429`, …), and `timeout` / `network` for none. */
  readonly byStatus: Readonly<Record<string, number>>;
  /** The ids of the 202 answers, in the order they came. */
  readonly accepted: readonly string[];
}

function post(
  agent: Agent,
  url: URL,
  headers: Record<string, string>,
  payload: string,
  timeoutMs: number,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        agent,
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: 'POST',
        headers: { ...headers, 'content-length': String(Buffer.byteLength(payload)) },
        timeout: timeoutMs,
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          body += c;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(Object.assign(new Error('timeout'), { code: 'TIMEOUT' })));
    req.on('error', reject);
    req.end(payload);
  });
}

/** Runs the load; resolves once every client has had its last answer. */
export async function runHttpLoad(o: HttpLoadOptions): Promise<HttpLoadResult> {
  const url = new URL(o.path, o.url);
  if (!['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname))
    throw new Error(`the HTTP load runs on loopback only, got ${url.hostname}`);
  const agent = new Agent({ keepAlive: true, maxSockets: o.clients, maxFreeSockets: o.clients });
  const timeoutMs = o.timeoutMs ?? 30_000;
  const rampMs = o.rampMs ?? 1_000;
  const latencies: number[] = [];
  const byStatus: Record<string, number> = {};
  const accepted: string[] = [];
  let requests = 0;
  const t0 = performance.now();
  const end = t0 + o.durationMs;
  const client = async (i: number) => {
    await new Promise((r) => setTimeout(r, (rampMs * i) / o.clients));
    const headers = {
      authorization: `Bearer ${o.keys[i % o.keys.length]}`,
      'content-type': 'application/json',
    };
    for (let n = 0; performance.now() < end; n++) {
      const sent = performance.now();
      requests++;
      try {
        const res = await post(agent, url, headers, JSON.stringify(o.body(i, n)), timeoutMs);
        latencies.push(performance.now() - sent);
        byStatus[res.status] = (byStatus[res.status] ?? 0) + 1;
        if (res.status === 202) accepted.push((JSON.parse(res.body) as { id: string }).id);
      } catch (err) {
        const kind = (err as { code?: string }).code === 'TIMEOUT' ? 'timeout' : 'network';
        byStatus[kind] = (byStatus[kind] ?? 0) + 1;
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: o.clients }, (_, i) => client(i)));
  } finally {
    agent.destroy();
  }
  return { requests, wallMs: performance.now() - t0, latenciesMs: latencies, byStatus, accepted };
}
