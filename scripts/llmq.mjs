#!/usr/bin/env node
// The `llmq` command. llmq runs its TypeScript directly through tsx: no build step to forget.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('./cli.ts');
process.exitCode = await main(process.argv);
