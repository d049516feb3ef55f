#!/usr/bin/env node
// The `llmq` command: runs the compiled CLI in dist/ and nothing else. In a clone, `npm ci` builds
// it (`npm run build` rebuilds); `npm run llmq:dev -- …` runs the TypeScript instead.
import { existsSync } from 'node:fs';

const entry = new URL('../dist/scripts/cli/main.js', import.meta.url);
if (!existsSync(entry)) {
  process.stderr.write(`llmq: ${entry.pathname} is missing: run npm run build first\n`);
  process.exit(1);
}
const { main } = await import(entry.href);
process.exitCode = await main(process.argv);
