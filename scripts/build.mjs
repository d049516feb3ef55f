// `npm run build` (also run by `npm ci` in a clone, and by `npm pack`, as `prepare`): compiles the
// TypeScript to JavaScript with declarations in dist/, with the Lua scripts and samples beside it.
import { execFileSync } from 'node:child_process';
import { cpSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);
let tsc;
try {
  tsc = join(dirname(require.resolve('typescript/package.json')), 'bin', 'tsc');
} catch {
  // An install without dev dependencies (npm ci --omit=dev) cannot compile; dist/ stays as it is.
  console.warn('llmq build: typescript is not installed (dev dependency); dist/ was not rebuilt');
  process.exit(0);
}

rmSync(join(root, 'dist'), { recursive: true, force: true });
execFileSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], {
  cwd: root,
  stdio: 'inherit',
});

/** Copies every file the code reads at run time (Lua scripts, sample documents) into dist/. */
function copyAssets(dir) {
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (!entry.isDirectory()) continue;
    if (entry.name === 'lua' || entry.name === 'samples') {
      cpSync(join(root, path), join(root, 'dist', path), { recursive: true });
    } else {
      copyAssets(path);
    }
  }
}
for (const d of ['producer', 'worker', 'shared', 'dashboard', 'scripts', 'testing']) copyAssets(d);
cpSync(join(root, 'shared/prices.json'), join(root, 'dist/shared/prices.json'));

/** Declarations name their imports `.js`, as the JavaScript does (tsc leaves them `.ts`). */
function rewriteDeclarations(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) rewriteDeclarations(path);
    else if (entry.name.endsWith('.d.ts')) {
      const text = readFileSync(path, 'utf8');
      const fixed = text.replace(/((?:from\s+|import\()['"]\.\.?\/[^'"]*)\.ts(['"])/g, '$1.js$2');
      if (fixed !== text) writeFileSync(path, fixed);
    }
  }
}
rewriteDeclarations(join(root, 'dist'));
// The compiled modules read their version from here (shared/version.ts) and are ES modules.
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
writeFileSync(
  join(root, 'dist/package.json'),
  `${JSON.stringify({ name: `${pkg.name}-dist`, version: pkg.version, private: true, type: 'module' }, null, 2)}\n`,
);
console.log('llmq build: dist/ is up to date');
