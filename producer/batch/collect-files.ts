import { readdir, stat } from 'node:fs/promises';
import { extname, join } from 'node:path';
import { ConfigError } from '../../shared/errors.ts';

/** The kinds of file a batch summarizes: text, and PDFs sent as document blocks. */
export const DOCUMENT_EXTENSIONS: readonly string[] = ['.txt', '.md', '.pdf'];
/** Images, sent as image blocks when asked for. */
export const IMAGE_EXTENSIONS: readonly string[] = ['.png', '.jpg', '.jpeg', '.gif', '.webp'];

export interface CollectOptions {
  /** Take images (PNG, JPEG, GIF, WebP) too. @default false */
  readonly images?: boolean;
}

/**
 * The documents under `paths`, in a stable order: each path in the order given; a folder's
 * .txt, .md and .pdf files (and images with `images`) recursively, sorted by name (hidden
 * entries skipped). A file named directly must be one of those too. Each file appears once.
 */
export async function collectFiles(
  paths: readonly string[],
  options: CollectOptions = {},
): Promise<string[]> {
  const kinds = options.images
    ? [...DOCUMENT_EXTENSIONS, ...IMAGE_EXTENSIONS]
    : DOCUMENT_EXTENSIONS;
  const isDocument = (name: string) => kinds.includes(extname(name).toLowerCase());
  const named = options.images ? '.txt, .md, .pdf or image' : '.txt, .md or .pdf';
  if (paths.length === 0)
    throw new ConfigError(`no PATH given: name the ${named} files or folders to summarize`);
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
      throw new ConfigError(`PATH ${path} does not exist: name ${named} files or folders`);
    }
    if (info.isDirectory()) for (const f of await walk(path, isDocument)) add(f);
    else if (isDocument(path)) add(path);
    else {
      const hint = !options.images && IMAGE_EXTENSIONS.includes(extname(path).toLowerCase());
      throw new ConfigError(
        `PATH ${path} is not a ${named} file${hint ? ' (pass --images to summarize images)' : ''}`,
      );
    }
  }
  return out;
}

async function walk(dir: string, isDocument: (name: string) => boolean): Promise<string[]> {
  const entries = (await readdir(dir, { withFileTypes: true }))
    .filter((e) => !e.name.startsWith('.'))
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const out: string[] = [];
  for (const e of entries) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...(await walk(p, isDocument)));
    else if (e.isFile() && isDocument(e.name)) out.push(p);
  }
  return out;
}
