#!/usr/bin/env node
// The `llmq` command. It runs the compiled JavaScript in dist/ (`npm run build`, done by
// `npm ci`) while that build matches the sources, and the TypeScript itself through tsx
// otherwise, so an edit is never hidden behind an old build. LLMQ_FROM_SOURCE=1 forces tsx.
import { buildIsCurrent } from './build-stamp.mjs';

const root = new URL('../', import.meta.url).pathname;
let main;
if (process.env.LLMQ_FROM_SOURCE !== '1' && buildIsCurrent(root)) {
  ({ main } = await import('../dist/scripts/cli.js'));
} else {
  const { register } = await import('tsx/esm/api');
  register();
  ({ main } = await import('./cli.ts'));
}
process.exitCode = await main(process.argv);
