/**
 * docs/deployment.md's Kubernetes manifests work as written: each Deployment's container runs
 * its `args` (the ports swapped for free ones and the queue for a test's own), and every probe
 * it declares answers 200 on the port those args open; the worker's grace fits in the pod's.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { hashApiKey } from '../producer/http/api-keys.ts';
import { type Proc, poolsPerTest } from './fixtures/worker-harness.ts';
import { until } from './helpers.ts';

const ROOT = new URL('../', import.meta.url).pathname;

interface Manifest {
  readonly args: string[];
  readonly probes: { kind: string; path: string; port: number }[];
  readonly graceS: number | undefined;
}

/** The Deployments of the yaml blocks of docs/deployment.md. */
function manifests(): Manifest[] {
  const doc = readFileSync(`${ROOT}docs/deployment.md`, 'utf8');
  const blocks = [...doc.matchAll(/^```yaml\n([\s\S]*?)^```$/gm)].map((m) => m[1]!);
  return blocks.flatMap((block) =>
    block
      .split(/^---$/m)
      .filter((part) => /^kind: Deployment$/m.test(part))
      .map((part) => ({
        args: JSON.parse(/^\s+args: (\[.*\])$/m.exec(part)![1]!) as string[],
        probes: [
          ...part.matchAll(/(\w+Probe):\s*\n\s*httpGet: \{ path: (\S+), port: (\d+) \}/g),
        ].map((m) => ({ kind: m[1]!, path: m[2]!, port: Number(m[3]) })),
        graceS: Number(/terminationGracePeriodSeconds: (\d+)/.exec(part)?.[1]) || undefined,
      })),
  );
}

/** The value after `flag` in `args`. */
const flagValue = (args: readonly string[], flag: string) => args[args.indexOf(flag) + 1];

/** The port a command opens for its probes. */
const portFlag = (command: string) => (command === 'worker' ? '--health-port' : '--port');

const openTestPool = poolsPerTest();

/** Starts the command; resolves with the base URL it says it serves at. */
async function serving(proc: Proc, command: string): Promise<string> {
  const said = () =>
    command === 'worker'
      ? /health probes at (http:\/\/\S+) /.exec(proc.stderr())?.[1]
      : /^(http:\/\/[^/\s]+)/m.exec(proc.stdout())?.[1];
  await Promise.race([
    until(() => said() !== undefined, 60_000, 50),
    proc.exited().then((code) => {
      throw new Error(`llmq ${command} exited (${code}): ${proc.stderr()}`);
    }),
  ]);
  return said()!;
}

describe("docs/deployment.md's Kubernetes manifests", () => {
  const found = manifests();

  it('has a Deployment for the worker, serve and the dashboard, each with liveness and readiness probes', () => {
    expect(found.map((m) => m.args[0])).toEqual(['worker', 'serve', 'dashboard']);
    for (const m of found) {
      const kinds = m.probes.map((p) => p.kind);
      expect(kinds, m.args[0]).toContain('livenessProbe');
      expect(kinds, m.args[0]).toContain('readinessProbe');
      // Every probe asks the port the command opens.
      for (const p of m.probes)
        expect(p.port, `${m.args[0]} ${p.kind}`).toBe(
          Number(flagValue(m.args, portFlag(m.args[0]!))),
        );
    }
    const worker = found[0]!;
    expect(worker.graceS).toBeGreaterThan(Number(flagValue(worker.args, '--grace')));
  });

  for (const m of manifests()) {
    const command = m.args[0]!;
    it(`llmq ${command} with the manifest's args answers every probe it declares`, async () => {
      const pool = await openTestPool(`k8s-${command}`);
      const args = m.args.map((a, i) => {
        const flag = m.args[i - 1];
        if (flag === portFlag(command)) return '0';
        if (flag === '--queue') return pool!.names.queue;
        return a;
      });
      const env = pool.cliEnv({
        LLMQ_API_KEYS: `acme:${hashApiKey('sk-k8s-doc')}`,
        LLMQ_DASHBOARD_TOKEN: 'k8s-doc-token',
      });
      const base = await serving(pool.startCli(args, env), command);
      for (const p of m.probes) {
        const res = await fetch(`${base}${p.path}`);
        expect(res.status, `${command} ${p.kind} ${p.path}`).toBe(200);
      }
    });
  }
});
