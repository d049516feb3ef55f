import { appendFileSync, cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LayoutMismatchError } from '../shared/errors.ts';
import { FleetLayout, layoutStamp } from '../shared/layout.ts';
import { loadLuaScripts } from '../shared/lua-scripts.ts';
import { openPool, type Pool, ROOT } from './fixtures/worker-harness.ts';

const LUA_DIRS = ['shared/lua', 'shared/limiter/lua', 'producer/lua', 'worker/lua'];

/** A copy of this build's scripts in a folder of its own: another build, once one is changed. */
function copyOfTheScripts(): string {
  const root = mkdtempSync(join(tmpdir(), 'llmq-layout-'));
  for (const dir of LUA_DIRS) cpSync(join(ROOT, dir), join(root, dir), { recursive: true });
  return root;
}

let other: string;
let same: string;
let pool: Pool;

beforeAll(async () => {
  same = copyOfTheScripts();
  other = copyOfTheScripts();
  // The other build changed one script (a comment is enough: its text differs).
  appendFileSync(join(other, 'producer/lua/takeWaiting-7.lua'), '\n-- changed\n');
  pool = await openPool('layout');
});
afterAll(async () => {
  await pool?.cleanup();
  for (const dir of [same, other]) if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('versions that protect', () => {
  it('the stamp and the script names follow the scripts, not a version number', () => {
    expect(layoutStamp(same)).toBe(layoutStamp());
    expect(layoutStamp(other)).not.toBe(layoutStamp());
    const ours = loadLuaScripts(join(ROOT, 'producer/lua'));
    const theirs = loadLuaScripts(join(other, 'producer/lua'));
    expect(theirs['takeWaiting']!.command).not.toBe(ours['takeWaiting']!.command);
    expect(theirs['reserveDepth']!.command).toBe(ours['reserveDepth']!.command);
  });

  it('a worker of another build refuses to start beside the live fleet, and says what to do', async () => {
    const live = await pool.worker();
    const claim = FleetLayout.claim({
      redis: pool.redis,
      names: pool.names,
      workerId: 'other-build-1',
      stamp: layoutStamp(other),
    });
    await expect(claim).rejects.toThrow(LayoutMismatchError);
    await expect(claim).rejects.toThrow(
      new RegExp(
        `queue "${pool.names.queue}" is served by 1 worker\\(s\\) of another llmq build \\(layout ${layoutStamp()}.*stop those workers first, or wait until they are gone`,
      ),
    );
    await live.stop(1_000);
    // Once the fleet is gone, the other build starts.
    const after = await FleetLayout.claim({
      redis: pool.redis,
      names: pool.names,
      workerId: 'other-build-1',
      stamp: layoutStamp(other),
    });
    // And now this build's worker is the one refused.
    await expect(pool.worker()).rejects.toThrow(
      /of another llmq build \(layout [0-9a-f]{16}; this build is/,
    );
    await after.release();
    const back = await pool.worker();
    expect(back.id).toMatch(/^[0-9a-f-]{36}$/);
  });
});
