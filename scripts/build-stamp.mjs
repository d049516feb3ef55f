// What the compiled copy in dist/ was built from: every source file the build reads, with its
// size and modification time. `llmq` runs dist/ only while this still matches the tree, so an
// edit is never hidden behind an old build. Plain JavaScript: the bin reads it before tsx loads.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

/** The folders the build compiles or copies from, and the files at the top it reads. */
export const SOURCE_DIRS = ['producer', 'worker', 'shared', 'dashboard', 'scripts'];
export const SOURCE_FILES = ['index.ts', 'package.json', 'tsconfig.json', 'tsconfig.build.json'];
export const STAMP = 'dist/build-stamp.json';

function walk(root, dir, out) {
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) walk(root, path, out);
    else out.push(path);
  }
}

/** A digest of the paths, sizes and modification times of every source file under `root`. */
export function sourceFingerprint(root) {
  const files = [...SOURCE_FILES];
  for (const d of SOURCE_DIRS) walk(root, d, files);
  const hash = createHash('sha256');
  for (const f of files.sort()) {
    const s = statSync(join(root, f));
    hash.update(`${relative(root, join(root, f))}\0${s.size}\0${s.mtimeMs}\n`);
  }
  return hash.digest('hex');
}

/** True when dist/ holds a build of exactly the sources under `root` as they are now. */
export function buildIsCurrent(root) {
  try {
    const stamp = JSON.parse(readFileSync(join(root, STAMP), 'utf8'));
    return stamp.fingerprint === sourceFingerprint(root);
  } catch {
    return false;
  }
}
