/**
 * The Node 20 promise: every installed package admits the oldest Node the project says it runs on,
 * so a clean `npm ci` on it prints no EBADENGINE warning. Read from node_modules, no network.
 * (A dependent's install, which the repo's settings do not reach, is test/package.test.ts's.)
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import semver from 'semver';
import { describe, expect, it } from 'vitest';
import { NODE_LINES } from './fixtures/node-lines.ts';

const ROOT = new URL('../', import.meta.url).pathname;

interface Installed {
  readonly id: string;
  readonly node: string | undefined;
}

function readManifest(path: string): { name?: string; version?: string; engines?: unknown } {
  return JSON.parse(readFileSync(path, 'utf8'));
}

/** Every package under `dir` (scoped ones and nested node_modules included). */
function installedUnder(dir: string): Installed[] {
  if (!existsSync(dir)) return [];
  const found: Installed[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (!entry.isDirectory() || entry.name.startsWith('.')) continue;
    const path = join(dir, entry.name);
    if (entry.name.startsWith('@')) {
      found.push(...installedUnder(path));
      continue;
    }
    const manifest = join(path, 'package.json');
    if (existsSync(manifest)) {
      const { name, version, engines } = readManifest(manifest);
      const node = (engines as { node?: unknown } | undefined)?.node;
      found.push({ id: `${name}@${version}`, node: typeof node === 'string' ? node : undefined });
    }
    found.push(...installedUnder(join(path, 'node_modules')));
  }
  return found;
}

describe('the engines of what npm installs', () => {
  it('the oldest Node the project admits is a Node 20', () => {
    const range = readManifest(join(ROOT, 'package.json')).engines as { node: string };
    expect(semver.minVersion(range.node)?.major).toBe(20);
  });

  it('engines.node admits every Node line the package is tested on, from the oldest it admits', () => {
    const range = (readManifest(join(ROOT, 'package.json')).engines as { node: string }).node;
    expect(NODE_LINES[0]).toBe(semver.minVersion(range)?.major);
    for (const line of NODE_LINES)
      expect(semver.satisfies(`${line}.99.0`, range), `${line}`).toBe(true);
  });

  it("every installed package's engines.node admits that Node", () => {
    const { engines } = readManifest(join(ROOT, 'package.json')) as { engines: { node: string } };
    const oldest = semver.minVersion(engines.node)!.version;
    const installed = installedUnder(join(ROOT, 'node_modules'));
    // The web stack, the SDKs and the tools at least: a walk that found nothing proves nothing.
    expect(installed.length).toBeGreaterThan(200);
    for (const name of ['fastify@', 'cookie@', 'content-disposition@', 'bullmq@']) {
      expect(installed.some((p) => p.id.startsWith(name))).toBe(true);
    }
    const refusing = installed
      .filter((p) => p.node !== undefined && !semver.satisfies(oldest, p.node))
      .map((p) => `${p.id} wants node ${p.node}`);
    expect(refusing, `packages that would warn EBADENGINE on Node ${oldest}`).toEqual([]);
  });
});
