import { createServer, type IncomingHttpHeaders, request } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

/**
 * A pass-through HTTP proxy in front of the mock, one per worker slot: it counts the worker's
 * Messages calls and which are still under way, so the chaos run can kill a worker while its
 * calls are in flight and tell how many it cut.
 */
export interface CallWatch {
  readonly url: string;
  /** `POST /v1/messages` calls that have started and not ended. */
  inFlight(): number;
  /** Those of them the provider has already answered (headers sent): admitted and charged. */
  answeredInFlight(): number;
  /** Every call that went through. */
  total(): number;
  close(): Promise<void>;
}

export async function startCallWatch(target: string): Promise<CallWatch> {
  const upstream = new URL(target);
  const open = new Map<object, { answered: boolean }>();
  const sockets = new Set<Socket>();
  let total = 0;
  const server = createServer((req, res) => {
    const watched = req.method === 'POST' && (req.url ?? '').startsWith('/v1/messages');
    const call = { answered: false };
    const end = () => open.delete(call);
    if (watched) {
      total++;
      open.set(call, call);
      res.once('close', end);
    }
    const out = request(
      {
        host: upstream.hostname,
        port: upstream.port,
        method: req.method,
        path: req.url,
        headers: req.headers as IncomingHttpHeaders,
      },
      (up) => {
        call.answered = true;
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
        up.on('error', () => res.destroy());
      },
    );
    out.on('error', () => res.destroy());
    // A killed worker's connection is cut: so is the provider's side, as over a real network.
    res.once('close', () => out.destroy());
    req.pipe(out);
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    inFlight: () => open.size,
    answeredInFlight: () => [...open.values()].filter((c) => c.answered).length,
    total: () => total,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of sockets) s.destroy();
      }),
  };
}
