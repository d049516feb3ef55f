import { readdir, stat } from 'node:fs/promises';
import { extname, join } from 'node:path';
import { ConfigError } from '../../shared/errors.ts';

/** The kinds of file a batch summarizes. */
export const DOCUMENT_EXTENSIONS: readonly string[] = ['.txt', '.md'];

const isDocument = (name: string) => DOCUMENT_EXTENSIONS.includes(extname(name).toLowerCase());

/**
 * The documents under `paths`, in a stable order: each path in the order given; a folder's
 * .txt and .md files recursively, sorted by name (hidden entries skipped). A file named
 * directly must be a .txt or .md too. Each file appears once.
 */
export async function collectFiles(paths: readonly string[]): Promise<string[]> {
  if (paths.length === 0)
    throw new ConfigError('no PATH given: name the .txt/.md files or folders to summarize');
  const out: string[] = [];
  const seen = new Set<string>();
  const add = (f: string) => {
    if (!seen.has(f)) {
      seen.add(f);
      out.push(f);
    }
  };
  for (const path of paths) {
    let info: Awaited<ReturnType<typeof stat>>;
    try {
      info = await stat(path);
    } catch {
      throw new ConfigError(`PATH ${path} does not exist: name .txt/.md files or folders`);
    }
    if (info.isDirectory()) for (const f of await walk(path)) add(f);
    else if (isDocument(path)) add(path);
    else throw new ConfigError(`PATH ${path} is not a .txt or .md file`);
  }
  return out;
}

async function walk(dir: string): Promise<string[]> {
  const entries = (await readdir(dir, { withFileTypes: true }))
    .filter((e) => !e.name.startsWith('.'))
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const out: string[] = [];
  for (const e of entries) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...(await walk(p)));
    else if (e.isFile() && isDocument(e.name)) out.push(p);
  }
  return out;
}
