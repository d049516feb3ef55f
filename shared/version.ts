import { readFileSync } from 'node:fs';

/** llmq's version, from package.json; it names the Lua commands so two versions never collide. */
export const VERSION: string = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
    version: string;
  }
).version;
