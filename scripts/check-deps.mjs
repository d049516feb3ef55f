// `npm run deps`: the dependency rule. The product (index.ts, producer/, worker/, shared/,
// dashboard/) never imports the CLI, the tools (mock server, bench, demo), the tests or commander;
// commander lives in scripts/cli/ alone; shipped code imports only run-time dependencies.
import { readdirSync, readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const PRODUCT = ['index.ts', 'producer', 'worker', 'shared', 'dashboard'];
const SHIPPED = [...PRODUCT, 'testing', 'scripts'];
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const runtime = new Set(Object.keys(pkg.dependencies ?? {}));
const builtins = new Set(builtinModules);

function tsFiles(path) {
  const full = join(root, path);
  if (path.endsWith('.ts')) return [path];
  return readdirSync(full, { withFileTypes: true }).flatMap((e) =>
    e.name === 'node_modules'
      ? []
      : e.isDirectory()
        ? tsFiles(join(path, e.name))
        : e.name.endsWith('.ts')
          ? [join(path, e.name)]
          : [],
  );
}

/** The module specifiers a file imports or re-exports (static and dynamic), comments aside. */
function specifiers(file) {
  const code = readFileSync(join(root, file), 'utf8')
    .replace(/\/\*[\s\S]*?\*\//g, '')
    .replace(/^\s*\/\/.*$/gm, '');
  const found = [];
  for (const re of [
    /\b(?:import|export)\s[^'"`;]*?\bfrom\s*['"]([^'"]+)['"]/g,
    /^\s*import\s*['"]([^'"]+)['"]/gm,
    /\bimport\(\s*['"]([^'"]+)['"]\s*\)/g,
  ]) {
    for (const m of code.matchAll(re)) found.push(m[1]);
  }
  return found;
}

const packageOf = (spec) => spec.split('/').slice(0, spec.startsWith('@') ? 2 : 1).join('/');
const under = (path, folder) => path === folder || path.startsWith(`${folder}/`);
const problems = [];
// scripts/dev/ holds development tools (not built, not shipped).
for (const file of SHIPPED.flatMap(tsFiles).filter((f) => !under(f, 'scripts/dev'))) {
  const product = PRODUCT.some((p) => under(file, p));
  for (const spec of specifiers(file)) {
    const say = (why) => problems.push(`${file} imports ${spec}: ${why}`);
    if (spec.startsWith('.')) {
      const target = relative(root, resolve(root, dirname(file), spec));
      if (under(target, 'test')) say('shipped code must not import tests');
      else if (product && (under(target, 'scripts') || under(target, 'testing')))
        say('the product must not import the CLI or the tools (mock server, bench, demo)');
      else if (!under(file, 'scripts/cli') && under(target, 'scripts/cli'))
        say('only the CLI imports the CLI');
      continue;
    }
    const name = packageOf(spec.replace(/^node:/, ''));
    if (name === 'commander' && !under(file, 'scripts/cli'))
      say('commander belongs to the CLI (scripts/cli/) alone');
    else if (!spec.startsWith('node:') && !builtins.has(name) && !runtime.has(name))
      say(`${name} is not a run-time dependency in package.json`);
  }
}
if (problems.length > 0) {
  for (const p of problems) console.error(`deps: ${p}`);
  process.exit(1);
}
console.log('deps: the product imports no CLI, tool or test, and only run-time dependencies');
