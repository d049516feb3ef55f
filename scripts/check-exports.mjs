// `npm run exports`: the package's main entry (index.ts) exports at most 30 names, values and
// types alike, and each one's declaration has TSDoc with an @example. What tests and tools need
// stays internal or goes to `llmq/testing`.
import { readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAst } from 'rolldown/parseAst';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const ENTRY = 'index.ts';
const MAX_NAMES = 30;

const parsed = new Map();
function parse(file) {
  if (!parsed.has(file)) {
    const code = readFileSync(join(root, file), 'utf8');
    parsed.set(file, { code, body: parseAst(code, { lang: 'ts' }, file).body });
  }
  return parsed.get(file);
}

const target = (from, spec) => relative(root, resolve(root, dirname(from), spec));
const declared = (d) => d?.id?.name ?? d?.declarations?.map((v) => v.id.name);

/** The TSDoc right above statement `i` of a file (between it and the statement before). */
function docAbove({ code, body }, i) {
  const text = code.slice(i > 0 ? body[i - 1].end : 0, body[i].start);
  return text.match(/\/\*\*(?:(?!\*\/)[\s\S])*\*\/\s*$/)?.[0];
}

/** Where `name` is declared, following re-exports: its file and its TSDoc. */
function declaration(file, name) {
  const f = parse(file);
  for (const [i, s] of f.body.entries()) {
    const names = [declared(s.declaration ?? s)].flat();
    if (names.includes(name) && s.type !== 'ImportDeclaration') return { file, doc: docAbove(f, i) };
    if (s.type === 'ExportNamedDeclaration' && s.source) {
      const spec = s.specifiers.find((x) => (x.exported.name ?? x.exported.value) === name);
      if (spec) return declaration(target(file, s.source.value), spec.local.name);
    }
    if (s.type === 'ExportAllDeclaration' && exportsOf(target(file, s.source.value)).has(name))
      return declaration(target(file, s.source.value), name);
  }
  return { file, doc: undefined };
}

/** Every name a module exports, `export *` followed. */
function exportsOf(file) {
  const names = new Set();
  for (const s of parse(file).body) {
    if (s.type === 'ExportAllDeclaration') {
      for (const n of exportsOf(target(file, s.source.value))) names.add(n);
    } else if (s.type === 'ExportNamedDeclaration') {
      for (const x of s.specifiers) names.add(x.exported.name ?? x.exported.value);
      for (const n of [declared(s.declaration) ?? []].flat()) names.add(n);
    } else if (s.type === 'ExportDefaultDeclaration') {
      names.add('default');
    }
  }
  return names;
}

const names = [...exportsOf(ENTRY)].sort();
const problems = [];
if (names.length > MAX_NAMES)
  problems.push(
    `${ENTRY} exports ${names.length} names (at most ${MAX_NAMES}): ${names.join(', ')}; keep internals internal, tools in llmq/testing`,
  );
for (const name of names) {
  const { file, doc } = declaration(ENTRY, name);
  if (!doc) problems.push(`${name} (${file}) has no TSDoc: say what it is and show it in use`);
  else if (!doc.includes('@example')) problems.push(`${name} (${file}) has no @example in its TSDoc`);
}
if (problems.length > 0) {
  for (const p of problems) console.error(`exports: ${p}`);
  process.exit(1);
}
console.log(`exports: ${ENTRY} exports ${names.length} names (at most ${MAX_NAMES}), each with an example`);
