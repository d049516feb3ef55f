// `npm run size`: a report, not a gate. Lists product files over 450 lines and functions over 80
// (from first line to last, comments included) as places worth a reader's look. Length is no
// target: a file or function is as long as its job needs; split by concept, never to fit.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAst } from 'rolldown/parseAst';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const MAX_FILE_LINES = 450;
const MAX_FUNCTION_LINES = 80;
const CODE = ['index.ts', 'producer', 'worker', 'shared', 'dashboard'];
/** The mock and the testing entry ship too: their files are held to the file length. */
const FILES = [...CODE, 'testing'];

function files(path, ext) {
  if (!existsSync(join(root, path))) return [];
  if (/\.\w+$/.test(path)) return ext.some((e) => path.endsWith(e)) ? [path] : [];
  return readdirSync(join(root, path), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() || ext.some((x) => e.name.endsWith(x)) ? files(join(path, e.name), ext) : [],
  );
}

/** The name a reader would look for: `Class.method`, the variable or key an arrow is bound to. */
function nameOf(node, parent, className) {
  if (node.id?.name) return node.id.name;
  const key = parent?.key?.name ?? parent?.key?.value;
  if (parent?.type === 'MethodDefinition' || parent?.type === 'PropertyDefinition')
    return `${className ?? '<class>'}.${key}`;
  if (parent?.type === 'Property' && key !== undefined) return String(key);
  if (parent?.type === 'VariableDeclarator' && parent.id?.name) return parent.id.name;
  return undefined;
}

/** Every function of a file with its name (or `<anonymous>` and the enclosing name) and lines. */
function functionsOf(file) {
  const code = readFileSync(join(root, file), 'utf8');
  const lineStarts = [0];
  for (let i = 0; i < code.length; i++) if (code[i] === '\n') lineStarts.push(i + 1);
  const lineAt = (offset) => {
    let lo = 0;
    let hi = lineStarts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (lineStarts[mid] <= offset) lo = mid;
      else hi = mid - 1;
    }
    return lo + 1;
  };
  const found = [];
  const visit = (node, parent, className, outer) => {
    if (!node || typeof node.type !== 'string') return;
    let inClass = className;
    let enclosing = outer;
    if (node.type === 'ClassDeclaration' || node.type === 'ClassExpression')
      inClass = node.id?.name ?? nameOf(node, parent) ?? '<class>';
    if (/^(FunctionDeclaration|FunctionExpression|ArrowFunctionExpression)$/.test(node.type)) {
      const named = nameOf(node, parent, className);
      const name = named ?? `${outer ? `${outer}>` : ''}<anonymous>`;
      // A method's lines start at its key (`async round() {`), not at its parameters.
      const from = parent?.type === 'MethodDefinition' || parent?.type === 'Property' ? parent : node;
      const start = lineAt(from.start);
      found.push({ name, start, lines: lineAt(node.end) - start + 1 });
      enclosing = named ?? name;
    }
    for (const [k, v] of Object.entries(node)) {
      if (k === 'start' || k === 'end') continue;
      if (Array.isArray(v)) for (const c of v) visit(c, node, inClass, enclosing);
      else if (v && typeof v === 'object') visit(v, node, inClass, enclosing);
    }
  };
  visit(parseAst(code, { lang: 'ts' }, file), undefined, undefined, undefined);
  return found;
}

const long = [];
for (const file of FILES.flatMap((d) => files(d, ['.ts', '.lua']))) {
  const lines = readFileSync(join(root, file), 'utf8').replace(/\n$/, '').split('\n').length;
  if (lines > MAX_FILE_LINES) long.push(`${file}: ${lines} lines`);
}
for (const file of CODE.flatMap((d) => files(d, ['.ts'])).filter((f) => !f.endsWith('.d.ts'))) {
  for (const f of functionsOf(file))
    if (f.lines > MAX_FUNCTION_LINES) long.push(`${file}:${f.start} ${f.name}: ${f.lines} lines`);
}
console.log(`size: ${long.length} files over ${MAX_FILE_LINES} lines or functions over ${MAX_FUNCTION_LINES}`);
for (const l of long) console.log(`  ${l}`);
